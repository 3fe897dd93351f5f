//! HTML escaping for the servers' status pages, which put resource,
//! bucket and address names into their markup.

/// `s` with the five characters HTML gives meaning to escaped, safe in
/// text and in quoted attribute values.
///
/// # Examples
///
/// ```
/// assert_eq!(tollgate_service::html_escape("a<b & 'c'"), "a&lt;b &amp; &#39;c&#39;");
/// ```
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
