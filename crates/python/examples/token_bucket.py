"""A token bucket: "may I, and how long must I wait?" without blocking.

    python crates/python/examples/token_bucket.py
"""

import time

import tollgate

# 5 tokens a second, up to 10 on hand; a caller may borrow up to 2 s of
# tokens ahead and is refused when its own wait would pass 1 s.
bucket = tollgate.TokenBucket("5", size=10, max_debt=2.0, max_wait=1.0)
for i in range(25):
    try:
        wait = bucket.reserve()
    except tollgate.BucketRefused as refused:
        print(f"call {i}: refused ({refused.refusal}): {refused}")
        time.sleep(0.2)
        continue
    if wait:
        time.sleep(wait)  # the wait to honour before using the token
    print(f"call {i}: waited {wait:.3f} s, {bucket.available} on hand")
