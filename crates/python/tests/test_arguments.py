"""Arguments are checked where they are given: a negative or too large
number, a bad address, an empty name or a zero interval is a ValueError
(a missing file a FileNotFoundError) at the call, never an OverflowError
and never a failure that shows up later."""

import pytest

import tollgate


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: tollgate.TokenBucket("100", size=-5), "size must be at least 1, not -5"),
        (lambda: tollgate.TokenBucket("100", size=0), "size must be at least 1, not 0"),
        (lambda: tollgate.TokenBucket("100", size=2**64), "size must be at most 18446744073709551615"),
        (lambda: tollgate.TokenBucket("100").reserve(-1), "n must be at least 0, not -1"),
        (lambda: tollgate.TokenBucket("100").reserve(2**70), "n must be at most"),
        (lambda: tollgate.RateLimiter("1K").acquire(-1), "n must be at least 0, not -1"),
        (lambda: tollgate.RateLimiter("1K").try_acquire(-3), "n must be at least 0, not -3"),
        (lambda: tollgate.RateLimiter("1K").acquire_timeout(1.0, -1), "n must be at least 0"),
        (lambda: tollgate.RateLimiter("1K").acquire_async(-1), "n must be at least 0"),
        (lambda: tollgate.RateLimiter("1K").acquire(2**64), "n must be at most"),
        (lambda: tollgate.RateLimiter("1K", fill_interval=0), "fill_interval must be a finite number of seconds > 0"),
    ],
)
def test_a_negative_or_too_large_number_is_a_value_error(call, message):
    with pytest.raises(ValueError) as raised:
        call()
    assert not isinstance(raised.value, OverflowError)
    assert message in str(raised.value)


def test_a_count_that_is_not_an_int_is_a_type_error():
    with pytest.raises(TypeError, match="n must be an int, not float"):
        tollgate.TokenBucket("100").reserve(1.5)
    with pytest.raises(TypeError, match="size must be an int, not str"):
        tollgate.TokenBucket("100", size="5")


def test_the_defaults_still_take_one():
    limiter = tollgate.RateLimiter("0.001,1.0")  # one op on hand, the next in 1,000 s
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    assert limiter.stats().admitted == 1
    bucket = tollgate.TokenBucket("1", size=3, max_debt=0, max_wait=0)
    assert bucket.reserve() == 0.0
    assert bucket.available == 2


def test_quota_client_numbers_names_and_address(dead_address):
    client = tollgate.QuotaClient(dead_address, "svc", "b", fallback_rate=100, deadline=0.5)
    for call in (client.allow, client.admit, client.allow_async, client.admit_async):
        with pytest.raises(ValueError, match="tokens must be at least 0, not -1"):
            call(-1)
    with pytest.raises(ValueError, match="namespace must not be empty"):
        tollgate.QuotaClient(dead_address, "", "b", fallback_rate=100)
    with pytest.raises(ValueError, match="bucket must not be empty"):
        tollgate.QuotaClient(dead_address, "svc", "", fallback_rate=100)
    with pytest.raises(ValueError, match="invalid server address 'nonsense'|invalid server address \"nonsense\""):
        tollgate.QuotaClient("nonsense", "svc", "b", fallback_rate=100)
    with pytest.raises(ValueError, match="deadline must be a finite number of seconds > 0"):
        tollgate.QuotaClient(dead_address, "svc", "b", fallback_rate=100, deadline=0)


def test_quota_client_needs_an_explicit_fallback_rate(dead_address):
    # No silent default: what to admit while the service is away is the
    # caller's choice.
    with pytest.raises(TypeError, match="fallback_rate"):
        tollgate.QuotaClient(dead_address, "svc", "b")


@pytest.mark.parametrize(
    "address, why",
    [
        ("nonsense", "no port"),
        ("doorman:", "the port must be a number from 1 to 65535"),
        ("doorman:0", "the port must be a number from 1 to 65535"),
        ("doorman:70000", "the port must be a number from 1 to 65535"),
        ("doorman:port", "the port must be a number from 1 to 65535"),
        (":15000", "no host"),
        ("::1:15000", "an IPv6 address goes in brackets"),
        ("ftp://doorman:15000", "unknown scheme"),
        ("http://doorman:15000/path", "no path"),
    ],
)
def test_a_bad_lease_server_address_is_refused_at_construction(address, why):
    with pytest.raises(ValueError) as raised:
        tollgate.LeaseClient([address])
    assert "invalid server address" in str(raised.value) and why in str(raised.value)
    assert "host:port" in str(raised.value)


@pytest.mark.parametrize("address", ["127.0.0.1:15000", "http://doorman:15000", "https://doorman:1/", "[::1]:15000"])
def test_good_addresses_are_accepted(address):
    tollgate.LeaseClient([address]).close()


def test_lease_client_numbers_and_intervals(dead_address):
    with pytest.raises(ValueError, match="rpc_timeout must be a finite number of seconds > 0"):
        tollgate.LeaseClient([dead_address], rpc_timeout=0)
    with pytest.raises(ValueError, match="client_id must not be empty"):
        tollgate.LeaseClient([dead_address], client_id="")
    with tollgate.LeaseClient([dead_address]) as client:
        with pytest.raises(ValueError, match="priority must be from"):
            client.resource("x", 1, priority=2**63)
        with pytest.raises(ValueError, match="priority must be from"):
            client.rate_limiter("y", 1, priority=-(2**64))
        with pytest.raises(ValueError, match="a resource id must not be empty"):
            client.resource("", 1)
        with pytest.raises(ValueError, match="a resource id must not be empty"):
            client.rate_limiter("", 1)


def test_one_address_string_is_a_list_of_one(doorman):
    from test_lease import wait_for_source

    with tollgate.LeaseClient(doorman.address) as client:
        assert wait_for_source(client.resource("one", 10), "lease").capacity == 10
    with pytest.raises(TypeError, match="servers must be an address"):
        tollgate.LeaseClient(15000)


def test_a_missing_tls_file_is_file_not_found_at_construction(tmp_path):
    with pytest.raises(FileNotFoundError) as raised:
        tollgate.Tls("/nowhere.pem")
    assert raised.value.filename == "/nowhere.pem"
    assert "/nowhere.pem" in str(raised.value)
    empty = tmp_path / "empty.pem"
    empty.write_text("not a certificate\n")
    with pytest.raises(ValueError, match="empty.pem"):
        tollgate.Tls(empty)
