//! The load's own plaintext HTTP/2 client: one task per connection drives
//! every caller on it, so that a read brings the answers of many calls and
//! one write sends the next requests of all of them.
//!
//! # Implementation notes
//!
//! The load should cost the two cores less than the server it measures.
//! Through the `h2` client each call is a stream object, a response future,
//! a body and a task wake-up, about as much CPU as the server spends on the
//! call. This client speaks only what a unary call needs, as frames:
//!
//! * the preface, then SETTINGS (no push, a 1 MiB stream window) and a
//!   WINDOW_UPDATE opening the connection's receive window to 4 MiB, as the
//!   `h2` client does; until the server's SETTINGS arrive, HTTP/2's
//!   defaults hold;
//! * a call is a HEADERS frame and DATA frames carrying the pre-framed
//!   request. The header block is HPACK: `:method POST` and `:scheme http`
//!   from the static table, and `:path`, `:authority`, `content-type` and
//!   `te` added to the server's dynamic table by the connection's first
//!   request and named by index after it (literals throughout, after a
//!   table size update to 0, once the server allows a table smaller than
//!   HPACK's default 4,096 bytes);
//! * an answer is its DATA (the response message, possibly over several
//!   frames) and the end of its stream. Header blocks are not decoded:
//!   a stream that ends without a message is a call that failed, and the
//!   caller's mode asks the full client (`GrpcConnection`) once for the
//!   status to report ([`Answer::Failed`]);
//! * the connection's send window and the server's stream limit are kept:
//!   a request waits for room rather than overrun them; the receive window
//!   is given back once half of it is used; a PING is answered, SETTINGS
//!   acknowledged, a RST_STREAM fails its call, and a GOAWAY ends the
//!   connection.

use std::collections::HashMap;
use std::io;

use tokio::net::TcpStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;

/// What this client gives each of its streams, and the connection.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 1 << 22;
/// HPACK's default table size: what the server's decoder holds unless its
/// SETTINGS say otherwise.
const HPACK_TABLE: u32 = 4096;
/// The largest frame the server reads unless its SETTINGS say otherwise.
const DEFAULT_MAX_FRAME: usize = 16_384;

/// How one call ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answer<'a> {
    /// The response message, without its 5-byte prefix.
    Message(&'a [u8]),
    /// The stream ended without a message (a gRPC error status), or was
    /// reset; the text says which.
    Failed(&'static str),
}

/// The server's settings this client obeys.
#[derive(Debug, Clone, Copy)]
struct Peer {
    max_streams: usize,
    max_frame: usize,
    /// Each new stream's send window.
    stream_window: i64,
    table: u32,
}

/// The header block of every request on one connection.
#[derive(Debug)]
struct Hpack {
    /// The first request's: literals added to the dynamic table.
    first: Vec<u8>,
    /// Every later request's: indexes into the dynamic table.
    indexed: Vec<u8>,
    sent_first: bool,
}

impl Hpack {
    fn new(path: &str, authority: &str, table: u32) -> Hpack {
        // :method POST (static 3), :scheme http (static 6).
        let head = [0x83, 0x86];
        let fields: [(&[u8], u8, &str); 4] = [
            (b"", 4, path),
            (b"", 1, authority),
            (b"", 31, "application/grpc"),
            (b"te", 0, "trailers"),
        ];
        let size: usize = [
            (":path", path),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        .iter()
        .map(|(n, v)| n.len() + v.len() + 32)
        .sum();
        let indexing = table >= HPACK_TABLE && size <= HPACK_TABLE as usize;
        let mut first = Vec::new();
        if !indexing {
            // A dynamic table size update to 0: the server's decoder holds
            // no entry of this connection's.
            first.push(0x20);
        }
        first.extend_from_slice(&head);
        for (name, index, value) in fields {
            if indexing {
                // Literal with incremental indexing: 01 and a 6-bit index.
                int(&mut first, 0x40, 6, u32::from(index));
            } else {
                // Literal without indexing: 0000 and a 4-bit index.
                int(&mut first, 0x00, 4, u32::from(index));
            }
            if index == 0 {
                string(&mut first, name);
            }
            string(&mut first, value.as_bytes());
        }
        let indexed = if indexing {
            // The newest entry is 62: te, content-type, :authority, :path.
            let mut indexed = head.to_vec();
            for i in [65, 64, 63, 62] {
                int(&mut indexed, 0x80, 7, i);
            }
            indexed
        } else {
            first[1..].to_vec()
        };
        Hpack {
            first,
            indexed,
            sent_first: false,
        }
    }

    fn next(&mut self) -> &[u8] {
        if std::mem::replace(&mut self.sent_first, true) {
            &self.indexed
        } else {
            &self.first
        }
    }
}

/// An HPACK integer with `bits` of prefix under `flags`.
fn int(out: &mut Vec<u8>, flags: u8, bits: u32, value: u32) {
    let max = (1u32 << bits) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// An HPACK string literal, not Huffman-coded.
fn string(out: &mut Vec<u8>, s: &[u8]) {
    int(out, 0, 7, u32::try_from(s.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(s);
}

fn frame_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// One stream in flight: whose it is and the message so far.
#[derive(Debug)]
struct Open {
    caller: usize,
    message: Vec<u8>,
    /// The response headers' or trailers' block is still coming
    /// (CONTINUATION frames), and ends the stream when done.
    ends: bool,
}

/// One plaintext HTTP/2 connection, its frames in and out.
#[derive(Debug)]
pub(crate) struct Conn {
    io: TcpStream,
    peer: Peer,
    hpack: Hpack,
    read: Vec<u8>,
    /// Bytes of `read` already taken as frames.
    taken: usize,
    write: Vec<u8>,
    next_id: u32,
    /// What the connection may still send as DATA.
    send_window: i64,
    /// DATA received since the receive window was last given back.
    received: u32,
    open: HashMap<u32, Open>,
    /// Message buffers of finished streams, for the next ones.
    spare: Vec<Vec<u8>>,
    /// The server's SETTINGS have arrived.
    saw_settings: bool,
    /// Where calls go, for a header block made again.
    path: String,
    authority: String,
}

impl Conn {
    /// Connects to `authority` (`host:port`), without Nagle's delay, and
    /// sends the preface and SETTINGS; calls go to `path`.
    ///
    /// # Errors
    ///
    /// The connection failing, or the server not speaking HTTP/2.
    pub(crate) async fn connect(authority: &str, path: &str) -> io::Result<Conn> {
        let io = TcpStream::connect(authority).await?;
        io.set_nodelay(true)?;
        let mut conn = Conn {
            io,
            peer: Peer {
                max_streams: usize::MAX,
                max_frame: DEFAULT_MAX_FRAME,
                stream_window: 65_535,
                table: HPACK_TABLE,
            },
            hpack: Hpack::new(path, authority, HPACK_TABLE),
            read: Vec::with_capacity(64 << 10),
            taken: 0,
            write: Vec::with_capacity(16 << 10),
            next_id: 1,
            send_window: 65_535,
            received: 0,
            open: HashMap::new(),
            spare: Vec::new(),
            saw_settings: false,
            path: path.to_owned(),
            authority: authority.to_owned(),
        };
        conn.write.extend_from_slice(PREFACE);
        // SETTINGS: ENABLE_PUSH 0, INITIAL_WINDOW_SIZE.
        frame_head(&mut conn.write, 12, SETTINGS, 0, 0);
        conn.write.extend_from_slice(&[0, 2, 0, 0, 0, 0]);
        conn.write.extend_from_slice(&[0, 4]);
        conn.write.extend_from_slice(&STREAM_WINDOW.to_be_bytes());
        frame_head(&mut conn.write, 4, WINDOW_UPDATE, 0, 0);
        conn.write
            .extend_from_slice(&(CONNECTION_WINDOW - 65_535).to_be_bytes());
        conn.flush().await?;
        Ok(conn)
    }

    /// Whether a request of `len` framed bytes can be sent now: the
    /// server's stream limit (one stream until its SETTINGS say what it
    /// is) and the connection's send window allow it.
    pub(crate) fn has_room(&self, len: usize) -> bool {
        let streams = if self.saw_settings {
            self.peer.max_streams
        } else {
            1
        };
        self.open.len() < streams && self.send_window >= len as i64
    }

    /// Queues a request with body `body` (gRPC-framed) for `caller`; sent
    /// by the next [`flush`](Self::flush).
    ///
    /// # Errors
    ///
    /// The connection's stream ids used up, or a body larger than the
    /// server's stream window.
    pub(crate) fn request(&mut self, caller: usize, body: &[u8]) -> io::Result<()> {
        if self.next_id > i32::MAX as u32 {
            return Err(io::Error::other("the connection's stream ids are used up"));
        }
        if body.len() as i64 > self.peer.stream_window {
            return Err(io::Error::other(format!(
                "a request of {} bytes is larger than the server's stream window of {}",
                body.len(),
                self.peer.stream_window
            )));
        }
        let id = self.next_id;
        self.next_id += 2;
        let block = self.hpack.next();
        let flags = if body.is_empty() {
            END_HEADERS | END_STREAM
        } else {
            END_HEADERS
        };
        frame_head(&mut self.write, block.len(), HEADERS, flags, id);
        self.write.extend_from_slice(block);
        let chunks = body.chunks(self.peer.max_frame.max(1));
        let n = chunks.len();
        for (i, chunk) in chunks.enumerate() {
            let flags = if i + 1 == n { END_STREAM } else { 0 };
            frame_head(&mut self.write, chunk.len(), DATA, flags, id);
            self.write.extend_from_slice(chunk);
        }
        self.send_window -= body.len() as i64;
        let mut message = self.spare.pop().unwrap_or_default();
        message.clear();
        self.open.insert(
            id,
            Open {
                caller,
                message,
                ends: false,
            },
        );
        Ok(())
    }

    /// Streams in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.open.len()
    }

    /// Sends everything queued.
    ///
    /// # Errors
    ///
    /// The connection failing.
    pub(crate) async fn flush(&mut self) -> io::Result<()> {
        let mut sent = 0;
        while sent < self.write.len() {
            self.io.writable().await?;
            match self.io.try_write(&self.write[sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        self.write.clear();
        Ok(())
    }

    /// Reads what the server has sent (at least one byte).
    ///
    /// # Errors
    ///
    /// The connection failing or closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is read unless the call completes.
    pub(crate) async fn fill(&mut self) -> io::Result<()> {
        if self.taken > 0 {
            self.read.drain(..self.taken);
            self.taken = 0;
        }
        loop {
            self.io.readable().await?;
            let len = self.read.len();
            let room = (64 << 10).max(self.read.capacity() - len);
            self.read.resize(len + room, 0);
            match self.io.try_read(&mut self.read[len..]) {
                Ok(0) => {
                    self.read.truncate(len);
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed the connection",
                    ));
                }
                Ok(n) => {
                    self.read.truncate(len + n);
                    return Ok(());
                }
                Err(e) => {
                    self.read.truncate(len);
                    if e.kind() != io::ErrorKind::WouldBlock {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Takes every whole frame read so far, calling `done` with each call
    /// that ended; queues the acknowledgements and window updates they
    /// need.
    ///
    /// # Errors
    ///
    /// A GOAWAY, or a frame that breaks the protocol.
    pub(crate) fn frames(&mut self, mut done: impl FnMut(usize, Answer<'_>)) -> io::Result<()> {
        loop {
            let buf = &self.read[self.taken..];
            let Some(head) = buf.get(..9) else {
                break;
            };
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            if buf.len() < 9 + len {
                break;
            }
            let start = self.taken + 9;
            self.taken += 9 + len;
            self.frame(kind, flags, stream, start, len, &mut done)?;
        }
        if self.received >= CONNECTION_WINDOW / 2 {
            frame_head(&mut self.write, 4, WINDOW_UPDATE, 0, 0);
            self.write.extend_from_slice(&self.received.to_be_bytes());
            self.received = 0;
        }
        Ok(())
    }

    fn frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        start: usize,
        len: usize,
        done: &mut impl FnMut(usize, Answer<'_>),
    ) -> io::Result<()> {
        let protocol = |what: &str| io::Error::other(format!("HTTP/2 protocol error: {what}"));
        match kind {
            DATA => {
                self.received += u32::try_from(len).unwrap_or(u32::MAX);
                let payload = unpadded(&self.read[start..start + len], flags)
                    .ok_or_else(|| protocol("bad DATA padding"))?;
                if let Some(open) = self.open.get_mut(&stream) {
                    open.message.extend_from_slice(payload);
                }
                if flags & END_STREAM != 0 {
                    self.end(stream, done);
                }
            }
            HEADERS | CONTINUATION => {
                // The block itself (with its padding and priority) is not
                // decoded: only whether it ends the stream matters.
                if kind == HEADERS {
                    if let Some(open) = self.open.get_mut(&stream) {
                        open.ends = flags & END_STREAM != 0;
                    }
                }
                if flags & END_HEADERS != 0 && self.open.get(&stream).is_some_and(|o| o.ends) {
                    self.end(stream, done);
                }
            }
            RST_STREAM => {
                if let Some(open) = self.open.remove(&stream) {
                    done(
                        open.caller,
                        Answer::Failed("the server reset the call's stream"),
                    );
                    self.spare.push(open.message);
                }
            }
            SETTINGS if flags & ACK == 0 => {
                let body = &self.read[start..start + len];
                if !len.is_multiple_of(6) {
                    return Err(protocol("bad SETTINGS length"));
                }
                for s in body.chunks_exact(6) {
                    let id = u16::from_be_bytes([s[0], s[1]]);
                    let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
                    match id {
                        1 if value < HPACK_TABLE && self.peer.table >= HPACK_TABLE => {
                            self.peer.table = value;
                            self.hpack = Hpack::new(&self.path, &self.authority, value);
                        }
                        3 => self.peer.max_streams = value as usize,
                        4 => self.peer.stream_window = i64::from(value),
                        5 => self.peer.max_frame = value as usize,
                        _ => {}
                    }
                }
                self.saw_settings = true;
                frame_head(&mut self.write, 0, SETTINGS, ACK, 0);
            }
            PING if flags & ACK == 0 => {
                let body: [u8; 8] = self.read[start..start + len]
                    .try_into()
                    .map_err(|_| protocol("bad PING length"))?;
                frame_head(&mut self.write, 8, PING, ACK, 0);
                self.write.extend_from_slice(&body);
            }
            WINDOW_UPDATE if stream == 0 => {
                let body = &self.read[start..start + len];
                let inc = body
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff)
                    .ok_or_else(|| protocol("bad WINDOW_UPDATE length"))?;
                self.send_window += i64::from(inc);
            }
            GOAWAY => {
                return Err(io::Error::other(
                    "the server closed the connection (GOAWAY)",
                ))
            }
            // Stream window updates (a request is never larger than the
            // stream's window), PRIORITY, acknowledgements, unknown kinds.
            _ => {}
        }
        Ok(())
    }

    fn end(&mut self, stream: u32, done: &mut impl FnMut(usize, Answer<'_>)) {
        let Some(open) = self.open.remove(&stream) else {
            return;
        };
        match open.message.get(5..) {
            Some(message) => done(open.caller, Answer::Message(message)),
            None => done(
                open.caller,
                Answer::Failed("the call ended without a response message"),
            ),
        }
        self.spare.push(open.message);
    }
}

/// A DATA frame's payload without its padding.
fn unpadded(payload: &[u8], flags: u8) -> Option<&[u8]> {
    if flags & PADDED == 0 {
        return Some(payload);
    }
    let (&pad, rest) = payload.split_first()?;
    rest.len()
        .checked_sub(usize::from(pad))
        .map(|end| &rest[..end])
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use prost::bytes::BytesMut;
    use tollgate_service::{GrpcServer, UnaryService};
    use tonic::codegen::Bytes;

    use super::*;

    #[test]
    fn hpack_integers_are_written_as_rfc_7541_shows() {
        // RFC 7541, C.1.1 to C.1.3.
        let mut out = Vec::new();
        int(&mut out, 0, 5, 10);
        assert_eq!(out, [10]);
        out.clear();
        int(&mut out, 0, 5, 1337);
        assert_eq!(out, [31, 154, 10]);
        out.clear();
        int(&mut out, 0, 8, 42);
        assert_eq!(out, [42]);
    }

    /// Answers `/t.T/Echo` with its request, and `/t.T/Big` with its
    /// request repeated 3,000 times (several DATA frames).
    struct Echo;

    impl UnaryService for Echo {
        type Method = bool;

        fn method(&self, path: &str) -> Option<bool> {
            match path {
                "/t.T/Echo" => Some(false),
                "/t.T/Big" => Some(true),
                _ => None,
            }
        }

        fn call(
            &self,
            big: bool,
            request: Bytes,
            response: &mut BytesMut,
        ) -> Result<(), tonic::Status> {
            for _ in 0..if big { 3000 } else { 1 } {
                response.extend_from_slice(&request);
            }
            Ok(())
        }
    }

    fn framed(message: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    type Answers = Vec<Result<Vec<u8>, String>>;

    /// Sends `requests` on one connection to `path`, as many at once as
    /// the server allows, and reads every answer (the message or why
    /// not), in request order; and the most streams open at once.
    async fn exchange(addr: &str, path: &str, requests: &[Vec<u8>]) -> (Answers, usize) {
        let mut conn = Conn::connect(addr, path).await.unwrap();
        let mut answers: Vec<Option<Result<Vec<u8>, String>>> = vec![None; requests.len()];
        let mut next = 0;
        let mut most = 0;
        loop {
            while next < requests.len() && conn.has_room(requests[next].len() + 5) {
                conn.request(next, &framed(&requests[next])).unwrap();
                next += 1;
            }
            most = most.max(conn.in_flight());
            conn.flush().await.unwrap();
            if conn.in_flight() == 0 {
                break;
            }
            conn.fill().await.unwrap();
            conn.frames(|i, answer| {
                answers[i] = Some(match answer {
                    Answer::Message(m) => Ok(m.to_vec()),
                    Answer::Failed(why) => Err(why.to_owned()),
                });
            })
            .unwrap();
        }
        // The server's limit of 64 streams was kept.
        assert!(most <= 64, "{most} streams open at once");
        (answers.into_iter().map(Option::unwrap).collect(), most)
    }

    #[tokio::test]
    async fn calls_on_a_lean_server_are_answered_each_on_its_stream() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(GrpcServer::new(Arc::new(Echo)).serve(listener, std::future::pending()));
        // 200 calls, over the first request's header block and the
        // indexed ones after it, one of them larger than a frame.
        let mut requests: Vec<Vec<u8>> =
            (0..200).map(|i| format!("call {i}").into_bytes()).collect();
        requests[7] = vec![7; 40_000];
        let (answers, most) = exchange(&addr, "/t.T/Echo", &requests).await;
        for (answer, request) in answers.iter().zip(&requests) {
            assert_eq!(answer.as_ref().unwrap(), request);
        }
        assert_eq!(most, 64, "the server's stream limit, once known");
        // An answer of several DATA frames is gathered whole.
        let (answers, _) = exchange(&addr, "/t.T/Big", &[b"0123456789".to_vec()]).await;
        assert_eq!(answers[0].as_ref().unwrap(), &b"0123456789".repeat(3000));
        // A refused call ends without a message.
        let (answers, _) = exchange(&addr, "/t.T/Nothing", &[b"x".to_vec(), b"y".to_vec()]).await;
        let failed = Err("the call ended without a response message".to_owned());
        assert_eq!(answers, [failed.clone(), failed]);
    }
}
