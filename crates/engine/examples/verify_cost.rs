//! What a speculative verify pass costs by its rows: the best time of a
//! `decode_rows_many` pass of 1 to 17 rows over one cache, after histories
//! of the given lengths (BENCHMARKS.md, issue 48).
//!
//!     cargo run --release -p hearth-engine --example verify_cost -- MODEL [300,2000]
//!
//! `ROWS=1,4` and `ROUNDS=60` narrow it (to profile one row count).

use std::time::Instant;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let ctxs: Vec<usize> =
        std::env::args().nth(2).unwrap_or("128,2000".into()).split(',').map(|x| x.parse().unwrap()).collect();
    let engine = hearth_engine::Engine::open(std::path::Path::new(&path)).unwrap();
    let m = engine.model();
    let rows_list: Vec<usize> = std::env::var("ROWS")
        .map(|r| r.split(',').map(|x| x.parse().unwrap()).collect())
        .unwrap_or(vec![1, 2, 3, 4, 5, 6, 8, 9, 12, 16, 17]);
    for ctx in ctxs {
        let hist: Vec<u32> = (0..ctx).map(|i| (100 + (i * 37) % 5000) as u32).collect();
        let mut base = m.new_cache(4096);
        m.forward(std::slice::from_ref(&hist), &mut base).unwrap();
        let mut best = vec![f64::MAX; rows_list.len()];
        for _round in 0..std::env::var("ROUNDS").map(|r| r.parse().unwrap()).unwrap_or(6) {
            for (k, &rows) in rows_list.iter().enumerate() {
                let feed: Vec<u32> = (0..rows).map(|i| 200 + i as u32).collect();
                for _ in 0..4 {
                    let t = Instant::now();
                    let mut refs = vec![&mut base];
                    m.decode_rows_many(&[&feed], &mut refs).unwrap();
                    best[k] = best[k].min(t.elapsed().as_secs_f64());
                    base.truncate(ctx);
                }
            }
        }
        let line: Vec<String> = rows_list.iter().zip(&best).map(|(r, b)| format!("{r}:{:.1}", b * 1e3)).collect();
        println!("ctx {ctx}: {}", line.join(" "));
    }
}
