//! A benchmark loop capped at a fixed op rate that reports response time
//! the honest way: service time plus how late each op started versus its
//! schedule (coordinated omission).
//!
//! ```sh
//! cargo run --release --example rate_capped_loop -- 50K,1.1 4
//! ```

use std::time::{Duration, Instant};

use tollgate::{RateLimiter, RateSpec};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let spec: RateSpec = args.next().as_deref().unwrap_or("50K,1.1").parse()?;
    let threads: usize = args.next().as_deref().unwrap_or("4").parse()?;
    let limiter = RateLimiter::new(spec);
    let run_for = Duration::from_secs(2);
    let start = Instant::now();

    let (ops, worst) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let (mut ops, mut worst) = (0u64, Duration::ZERO);
                    while start.elapsed() < run_for {
                        let late = limiter.acquire();
                        let began = Instant::now();
                        std::hint::black_box((0..100).sum::<u64>()); // the "op"
                        let response = late + began.elapsed();
                        worst = worst.max(response);
                        ops += 1;
                    }
                    (ops, worst)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker panicked"))
            .fold((0, Duration::ZERO), |(n, w), (ops, worst)| {
                (n + ops, w.max(worst))
            })
    });

    let secs = start.elapsed().as_secs_f64();
    let stats = limiter.stats();
    println!(
        "{spec}: {ops} ops in {secs:.2} s = {:.0} ops/s ({:.4} of target); worst response {worst:?}; \
         mean lateness {:?}; backlog now {:?}",
        ops as f64 / secs,
        ops as f64 / secs / spec.ops_per_sec(),
        stats.total_wait / u32::try_from(stats.admitted.max(1)).unwrap_or(u32::MAX),
        limiter.backlog(),
    );
    Ok(())
}
