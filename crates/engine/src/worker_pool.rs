//! The CPU threads that run one forward pass, and how many of them to use.
//!
//! A decode step of a small model is a few hundred tiny parallel regions
//! (one per matmul), each tens of microseconds long. A general-purpose pool
//! (rayon) costs more than that per region and leaves the calling thread
//! asleep; a spinning pool (llama.cpp's) collapses when the cores are busy
//! with other work, because a spinning thread burns the time slice its
//! descheduled partner needs. So this pool:
//!
//! - runs each region on the caller plus the workers, handing out tasks from
//!   one atomic counter, so a worker that the OS has descheduled simply does
//!   fewer tasks instead of stalling the others;
//! - spins only briefly between regions, then sleeps on a condition variable;
//! - watches how long the caller waits for tasks already claimed by a
//!   descheduled worker, and when one thread fewer would have finished the
//!   pass sooner, runs on fewer threads for a while (probing the full count
//!   again later).

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before it sleeps. Long enough to cover the
/// serial work between two regions of a decode step, short enough that an
/// idle app costs nothing.
const SPIN: Duration = Duration::from_micros(60);
/// Forward passes between attempts to use more threads again.
const PROBE_EVERY: u32 = 24;

/// A fixed set of worker threads plus the calling thread.
pub struct WorkerPool {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
    threads: usize,
    adaptive: Mutex<Adaptive>,
    /// One region at a time: sessions on different threads take turns.
    region: Mutex<()>,
}

type Job<'a> = &'a (dyn Fn(usize) + Sync);

struct Shared {
    /// High 32 bits: region number; low 32 bits: next task to hand out.
    cursor: AtomicU64,
    /// High 32 bits: region number; low 32 bits: its task count. Written
    /// before the region is published in `cursor`, and read by a claim after
    /// the cursor, so a worker still finishing the previous region can never
    /// pair that region's cursor with the next region's count (which once
    /// let a straggler claim a task of the new job twice).
    region_tasks: AtomicU64,
    finished: AtomicUsize,
    /// Workers with an index at or above this sit the region out.
    active: AtomicUsize,
    job: UnsafeCell<Option<Job<'static>>>,
    panicked: AtomicBool,
    /// Workers asleep (or about to be) on `wake`; the caller notifies only
    /// when some are, which keeps a busy decode loop free of system calls.
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
}

// SAFETY: `job` is written only by the caller between regions, while no
// worker can claim a task (see `WorkerPool::run`), and read only by a worker
// holding a claimed, unfinished task of the current region.
unsafe impl Sync for Shared {}

struct Adaptive {
    /// Threads in use (caller included), `1..=threads`.
    current: usize,
    passes_since_change: u32,
    /// The caller's time running tasks, and waiting for tasks others claimed.
    work: Duration,
    stalled: Duration,
    /// Tasks the caller ran, and tasks in all, this pass.
    own_tasks: usize,
    tasks: usize,
}

impl WorkerPool {
    /// A pool of `threads` threads in all: the caller and `threads - 1` workers.
    pub fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            cursor: AtomicU64::new(0),
            region_tasks: AtomicU64::new(0),
            finished: AtomicUsize::new(0),
            active: AtomicUsize::new(threads),
            job: UnsafeCell::new(None),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
        });
        let handles = (1..threads)
            .map(|index| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("hearth-cpu-{index}"))
                    .spawn(move || worker(&shared, index))
                    .expect("spawn a CPU worker")
            })
            .collect();
        Self {
            shared,
            handles,
            threads,
            region: Mutex::new(()),
            adaptive: Mutex::new(Adaptive {
                current: threads,
                passes_since_change: 0,
                work: Duration::ZERO,
                stalled: Duration::ZERO,
                own_tasks: 0,
                tasks: 0,
            }),
        }
    }

    /// The process-wide pool, sized by [`set_threads`] or else by the
    /// number of logical CPUs.
    pub fn global() -> &'static WorkerPool {
        GLOBAL.get_or_init(|| WorkerPool::new(*REQUESTED.get_or_init(default_threads)))
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Threads the next region will use (fewer than `threads` under contention).
    pub fn active_threads(&self) -> usize {
        self.shared.active.load(Ordering::Relaxed)
    }

    /// Runs `job(0..tasks)` across the pool and returns when all have run.
    /// Tasks are claimed in order, one at a time, so give each a similar,
    /// not-too-small share of work. Calls from several threads take turns;
    /// a job must not call `run` itself.
    pub fn run(&self, tasks: usize, job: &(dyn Fn(usize) + Sync)) {
        if tasks == 0 {
            return;
        }
        if tasks == 1 || self.active_threads() == 1 {
            (0..tasks).for_each(job);
            return;
        }
        let _turn = self.region.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        assert!(tasks < u32::MAX as usize);
        // SAFETY: every task of the previous region has finished, so no
        // worker reads `job` until the new region number is published below;
        // the lifetime is erased only for the duration of this call, which
        // does not return before every task of this region has finished.
        unsafe { *s.job.get() = Some(std::mem::transmute::<Job<'_>, Job<'static>>(job)) };
        let region = (s.cursor.load(Ordering::Relaxed) >> 32) + 1;
        s.region_tasks.store((region << 32) | tasks as u64, Ordering::Release);
        s.finished.store(0, Ordering::Relaxed);
        s.cursor.store(region << 32, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            // Taking the lock orders this wake-up after any worker's last look
            // at the cursor (see `worker`), so none sleeps through the region.
            drop(s.sleep.lock().unwrap_or_else(|e| e.into_inner()));
            s.wake.notify_all();
        }

        let started = Instant::now();
        let mut own_tasks = 0;
        while let Some(t) = claim(s, region) {
            run_task(s, job, t);
            own_tasks += 1;
        }
        let own_done = Instant::now();
        let mut spins = 0u32;
        while s.finished.load(Ordering::Acquire) < tasks {
            spins += 1;
            if spins < 256 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let end = Instant::now();
        {
            let mut a = self.adaptive.lock().unwrap_or_else(|e| e.into_inner());
            a.work += own_done - started;
            a.stalled += end - own_done;
            a.own_tasks += own_tasks;
            a.tasks += tasks;
        }
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a CPU worker panicked");
        }
    }

    /// Called once per forward pass: adapts the thread count to how much
    /// the caller waited on descheduled workers during the pass.
    pub fn end_pass(&self) {
        if self.threads == 1 {
            return;
        }
        let mut a = self.adaptive.lock().unwrap_or_else(|e| e.into_inner());
        let (work, stalled, own_tasks, tasks) = (a.work, a.stalled, a.own_tasks, a.tasks);
        a.work = Duration::ZERO;
        a.stalled = Duration::ZERO;
        a.own_tasks = 0;
        a.tasks = 0;
        a.passes_since_change += 1;
        // With every thread on a core the caller waits at most one task's
        // length per region; a descheduled worker makes it wait a time
        // slice. Fewer threads pay off only when that waiting costs more
        // than the workers' share of the tasks: at the caller's own pace,
        // the pass's tasks spread over one thread fewer would take
        // `work * tasks / own_tasks / (current - 1)`. (Under a moderate
        // load, a UI painting a third of one core's time, two threads still
        // beat one by a third; a plain share-of-waiting rule gave that up.)
        let now = (work + stalled).as_secs_f64();
        let fewer = if own_tasks > 0 && a.current > 1 {
            work.as_secs_f64() * tasks as f64 / own_tasks as f64 / (a.current - 1) as f64
        } else {
            f64::INFINITY
        };
        let contended = stalled.as_secs_f64() > 0.25 * now;
        if contended && fewer < 0.9 * now {
            a.current -= 1;
            a.passes_since_change = 0;
        } else if !contended && a.current < self.threads && a.passes_since_change >= PROBE_EVERY {
            a.current += 1;
            a.passes_since_change = 0;
        }
        self.shared.active.store(a.current, Ordering::Relaxed);
    }
}

fn claim(s: &Shared, region: u64) -> Option<usize> {
    let mut cur = s.cursor.load(Ordering::Acquire);
    let counted = s.region_tasks.load(Ordering::Acquire);
    if counted >> 32 != region {
        // The count already belongs to a newer region: this one is over.
        return None;
    }
    let tasks = (counted & 0xFFFF_FFFF) as usize;
    loop {
        if cur >> 32 != region {
            return None;
        }
        let next = (cur & 0xFFFF_FFFF) as usize;
        if next >= tasks {
            return None;
        }
        match s.cursor.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(next),
            Err(now) => cur = now,
        }
    }
}

fn run_task(s: &Shared, job: &(dyn Fn(usize) + Sync), t: usize) {
    if catch_unwind(AssertUnwindSafe(|| job(t))).is_err() {
        s.panicked.store(true, Ordering::Relaxed);
    }
    s.finished.fetch_add(1, Ordering::Release);
}

fn worker(s: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        // Spin briefly for the next region, then sleep until one is published.
        let spin_until = Instant::now() + SPIN;
        let mut region = s.cursor.load(Ordering::Acquire) >> 32;
        let mut n = 0u32;
        while region == seen && !s.shutdown.load(Ordering::Relaxed) {
            n += 1;
            if n.is_multiple_of(64) && Instant::now() > spin_until {
                let mut guard = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
                s.sleepers.fetch_add(1, Ordering::SeqCst);
                while s.cursor.load(Ordering::SeqCst) >> 32 == seen && !s.shutdown.load(Ordering::SeqCst) {
                    guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                s.sleepers.fetch_sub(1, Ordering::SeqCst);
                drop(guard);
                n = 0;
            } else {
                std::hint::spin_loop();
            }
            region = s.cursor.load(Ordering::Acquire) >> 32;
        }
        if s.shutdown.load(Ordering::Relaxed) {
            return;
        }
        seen = region;
        if index >= s.active.load(Ordering::Relaxed) {
            continue;
        }
        while let Some(t) = claim(s, region) {
            // SAFETY: a claimed, unfinished task keeps the caller inside
            // `run`, so the job it published is still alive and unchanged.
            let job = unsafe { (*s.job.get()).expect("a published job") };
            run_task(s, job, t);
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _guard = self.shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
        }
        self.shared.wake.notify_all();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// A mutable slice that the tasks of one region write at disjoint indices.
pub(crate) struct DisjointSlice<'a, T> {
    ptr: *mut T,
    len: usize,
    _slice: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: callers promise disjoint access (see the methods); T crosses threads.
unsafe impl<T: Send> Sync for DisjointSlice<'_, T> {}

impl<'a, T> DisjointSlice<'a, T> {
    pub(crate) fn new(slice: &'a mut [T]) -> Self {
        Self { ptr: slice.as_mut_ptr(), len: slice.len(), _slice: std::marker::PhantomData }
    }

    /// # Safety
    /// No other task reads or writes index `i` during the region.
    #[inline]
    pub(crate) unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len);
        self.ptr.add(i).write(v);
    }

    /// # Safety
    /// No other task touches `range` during the region.
    #[inline]
    #[allow(
        clippy::mut_from_ref,
        reason = "the caller promises disjoint ranges (see Safety): the slice is the region's own"
    )]
    pub(crate) unsafe fn slice(&self, range: std::ops::Range<usize>) -> &mut [T] {
        assert!(range.start <= range.end && range.end <= self.len);
        std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.end - range.start)
    }
}

static GLOBAL: OnceLock<WorkerPool> = OnceLock::new();
static REQUESTED: OnceLock<usize> = OnceLock::new();

/// Sets the size of the global pool. Only the first call before the pool is
/// first used has an effect; returns whether this one did.
pub fn set_threads(threads: usize) -> bool {
    REQUESTED.set(threads.max(1)).is_ok() && GLOBAL.get().is_none()
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_exactly_once_in_every_region() {
        let pool = WorkerPool::new(4);
        // 20,000 regions: a straggler pairing one region's cursor with the
        // next one's task count showed up about once in a few thousand.
        for round in 0..20000 {
            let tasks = 1 + round % 37;
            let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            pool.run(tasks, &|t| {
                hits[t].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "round {round}");
            if round % 1000 == 0 {
                std::thread::sleep(Duration::from_micros(200)); // let the workers fall asleep
            }
        }
    }

    #[test]
    fn a_panicking_task_is_reported_to_the_caller_and_the_pool_keeps_working() {
        let pool = WorkerPool::new(3);
        let r = catch_unwind(AssertUnwindSafe(|| pool.run(64, &|t| assert!(t != 40, "task 40"))));
        assert!(r.is_err());
        let sum = AtomicUsize::new(0);
        pool.run(10, &|t| {
            sum.fetch_add(t, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 45);
    }

    #[test]
    fn long_waits_on_workers_reduce_the_threads_used() {
        let pool = WorkerPool::new(2);
        // Waiting that costs more than running the workers' tasks alone.
        let mut a = pool.adaptive.lock().unwrap();
        a.work = Duration::from_millis(1);
        a.stalled = Duration::from_millis(3);
        a.own_tasks = 2;
        a.tasks = 4;
        drop(a);
        pool.end_pass();
        assert_eq!(pool.active_threads(), 1);
        for _ in 0..PROBE_EVERY {
            pool.run(4, &|_| std::thread::sleep(Duration::from_micros(50)));
            pool.end_pass();
        }
        assert_eq!(pool.active_threads(), 2, "probes the full count again when the waits are gone");
    }

    #[test]
    fn waits_shorter_than_the_workers_share_keep_the_threads() {
        // A worker descheduled a third of the time still ran 3 of 10 tasks:
        // alone, the caller would need 10/7 of its 7 ms, more than 7 + 3.
        let pool = WorkerPool::new(2);
        let mut a = pool.adaptive.lock().unwrap();
        a.work = Duration::from_millis(7);
        a.stalled = Duration::from_millis(3);
        a.own_tasks = 7;
        a.tasks = 10;
        drop(a);
        pool.end_pass();
        assert_eq!(pool.active_threads(), 2);
    }
}
