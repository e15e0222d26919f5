//! Background work runs below the model in CPU priority (hashing the model
//! file, and the like); the webview can be lowered too.
//!
//! The webview's helper processes (WebKitGTK's web and network processes,
//! children of this one) stay at the app's priority unless the app is told
//! otherwise (`lower_webview`, `HEARTH_WEBVIEW_NICE`). Lowered to nice 10, a
//! streaming reply on a 2-core machine gained about 5% (app at 0.92x the
//! CLI's speed against 0.87x, within the runs' spread), but beside two busy
//! programs the page got a tenth of a core: a long thread took 4-6 s to
//! open instead of 0.7 s, and Stop took 25 s instead of 4 (BENCHMARKS.md,
//! "The app under foreign load"). A page that freezes costs more than 5%.
//! (Before the page painted the open block at most every 100 ms, lowering
//! it was worth 0.7x to 1x; it is not any more.)

/// The nice value background threads run at.
pub const NICE: i32 = 10;

/// Lowers the calling thread to `NICE`; threads it starts inherit that.
pub fn lower_this_thread() {
    // On Linux a nice value is per thread, and `who` 0 is the calling one.
    #[cfg(target_os = "linux")]
    // SAFETY: a plain system call on the calling thread.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, NICE);
    }
}

/// The nice value the webview's processes run at unless the app is told
/// otherwise (`HEARTH_WEBVIEW_NICE`): the app's own.
pub const WEBVIEW_NICE: i32 = 0;

/// Lowers every thread of this process's child processes to `nice`
/// (a thread already there or below is left alone). Threads started later
/// inherit the value from the thread that starts them.
#[cfg(target_os = "linux")]
pub fn lower_webview(nice: i32) {
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else { return };
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if parent_of(pid) != Some(me) {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for task in tasks.flatten() {
            let Some(tid) = task.file_name().to_str().and_then(|n| n.parse::<libc::id_t>().ok()) else { continue };
            // SAFETY: plain system calls on a thread id; a thread that has
            // exited meanwhile makes them fail harmlessly.
            unsafe {
                *libc::__errno_location() = 0;
                let current = libc::getpriority(libc::PRIO_PROCESS, tid);
                if *libc::__errno_location() == 0 && current < nice {
                    libc::setpriority(libc::PRIO_PROCESS, tid, nice);
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub fn lower_webview(_nice: i32) {}

/// The parent process id, from `/proc/<pid>/stat` (whose second field, the
/// name, may itself hold spaces and parentheses).
#[cfg(target_os = "linux")]
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn lowers_the_children_and_not_this_process() {
        let nice = |pid: u32| unsafe { libc::getpriority(libc::PRIO_PROCESS, pid as libc::id_t) };
        let own_before = nice(std::process::id());
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        assert_eq!(parent_of(child.id()), Some(std::process::id()));
        lower_webview(NICE);
        let child_nice = nice(child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(child_nice, NICE.max(own_before));
        assert_eq!(nice(std::process::id()), own_before, "this process keeps its priority");
    }
}
