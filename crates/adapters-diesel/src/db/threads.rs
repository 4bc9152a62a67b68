//! The threads that run the database's blocking calls: at most the pool's size, started as
//! calls need them and kept while the database is open.
//!
//! A call runs on one of these rather than on tokio's blocking pool. That pool starts a new
//! thread whenever none is idle at the instant a call is handed over, and a thread that has
//! just finished a call is not idle yet; under steady load it grew to dozens of threads for a
//! pool of 8 connections, each with its own stack and allocator heap, and the memory they
//! touched stayed. Here a call that finds every thread busy waits in the queue for the next
//! one that finishes; the gate in front (at most the pool's size of calls at once) keeps that
//! wait to the moment a thread takes to come back.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};

use super::calls::lock;

/// One blocking call.
pub(super) type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    idle: usize,
    /// Wake-ups sent to waiting threads and not yet taken: a call hands its job to a waiting
    /// thread only if one is left that no earlier call has woken.
    woken: usize,
    /// Threads started and not ended.
    started: usize,
    /// The database was dropped: threads end once the queue is empty.
    closed: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

/// The database's threads. Dropping the last handle ends them once their calls return.
pub(super) struct Threads {
    shared: Arc<Shared>,
    most: usize,
    name: &'static str,
}

impl Threads {
    /// At most `most` threads (at least 1), none started yet.
    pub(super) fn new(most: usize, name: &'static str) -> Self {
        Self {
            shared: Arc::default(),
            most: most.max(1),
            name,
        }
    }

    /// Runs `job` on a thread: an idle one, a new one while fewer than the most are started,
    /// or the next one to finish. Fails only when no thread runs and none can be started.
    pub(super) fn run(&self, job: Job) -> std::io::Result<()> {
        let mut queue = lock(&self.shared.queue);
        queue.jobs.push_back(job);
        if queue.idle > queue.woken {
            queue.woken += 1;
            self.shared.ready.notify_one();
            return Ok(());
        }
        if queue.started >= self.most {
            return Ok(());
        }
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name(self.name.to_owned())
            .spawn(move || work(&shared));
        match spawned {
            Ok(_) => {
                queue.started += 1;
                Ok(())
            }
            // The threads already running take the job in turn.
            Err(_) if queue.started > 0 => Ok(()),
            Err(e) => {
                queue.jobs.pop_back();
                Err(e)
            }
        }
    }

    /// Threads started and not ended.
    #[cfg(test)]
    pub(super) fn started(&self) -> usize {
        lock(&self.shared.queue).started
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        lock(&self.shared.queue).closed = true;
        self.shared.ready.notify_all();
    }
}

/// A thread's life: jobs in turn until the database is dropped. A job that panics ends alone
/// (its caller sees its answer dropped); the thread goes on.
fn work(shared: &Shared) {
    let mut queue = lock(&shared.queue);
    loop {
        if let Some(job) = queue.jobs.pop_front() {
            drop(queue);
            let _ = catch_unwind(AssertUnwindSafe(job));
            queue = lock(&shared.queue);
            continue;
        }
        if queue.closed {
            queue.started -= 1;
            return;
        }
        queue.idle += 1;
        queue = shared
            .ready
            .wait(queue)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        queue.idle -= 1;
        queue.woken = queue.woken.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn threads_start_as_calls_need_them_up_to_the_most_and_a_panic_ends_only_its_call() {
        let threads = Threads::new(2, "db-test");
        assert_eq!(threads.started(), 0, "none at start");
        // Three calls at once on two threads: the third waits for the first to finish.
        let (release, held) = mpsc::channel::<()>();
        let held = Arc::new(Mutex::new(held));
        let (done, finished) = mpsc::channel::<u32>();
        for n in 0..3 {
            let (held, done) = (held.clone(), done.clone());
            threads
                .run(Box::new(move || {
                    if n < 2 {
                        let _ = lock(&held).recv();
                    }
                    let _ = done.send(n);
                }))
                .expect("run");
        }
        assert_eq!(threads.started(), 2, "never more than the most");
        assert!(
            finished.recv_timeout(Duration::from_millis(100)).is_err(),
            "both threads are busy"
        );
        release.send(()).expect("release");
        release.send(()).expect("release");
        let mut ended: Vec<u32> = (0..3)
            .map(|_| finished.recv_timeout(Duration::from_secs(5)).expect("ran"))
            .collect();
        ended.sort_unstable();
        assert_eq!(ended, [0, 1, 2]);
        // A call that panics drops its answer; the thread takes the next call.
        let (answer, answered) = mpsc::channel::<()>();
        threads
            .run(Box::new(move || {
                let _keep = answer;
                panic!("a call that fails");
            }))
            .expect("run");
        assert!(answered.recv_timeout(Duration::from_secs(5)).is_err());
        let (done, finished) = mpsc::channel::<()>();
        threads
            .run(Box::new(move || {
                let _ = done.send(());
            }))
            .expect("run");
        finished
            .recv_timeout(Duration::from_secs(5))
            .expect("the threads go on");
        assert_eq!(threads.started(), 2);
    }

    #[test]
    fn calls_handed_over_together_do_not_wait_for_one_woken_thread() {
        let threads = Threads::new(4, "db-test");
        let (done, finished) = mpsc::channel::<()>();
        let first = done.clone();
        threads
            .run(Box::new(move || {
                let _ = first.send(());
            }))
            .expect("run");
        finished.recv_timeout(Duration::from_secs(5)).expect("ran");
        // One thread, waiting. Two calls at once, each holding its thread until both run:
        // the second must start a thread of its own rather than queue behind the first.
        for _ in 0..500 {
            if lock(&threads.shared.queue).idle == 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let both = Arc::new(std::sync::Barrier::new(2));
        for _ in 0..2 {
            let (both, done) = (both.clone(), done.clone());
            threads
                .run(Box::new(move || {
                    both.wait();
                    let _ = done.send(());
                }))
                .expect("run");
        }
        for _ in 0..2 {
            finished
                .recv_timeout(Duration::from_secs(5))
                .expect("both ran at once");
        }
        assert_eq!(threads.started(), 2);
    }

    #[test]
    fn dropping_the_handle_ends_the_threads() {
        let threads = Threads::new(4, "db-test");
        let (done, finished) = mpsc::channel::<()>();
        let done2 = done.clone();
        threads
            .run(Box::new(move || {
                let _ = done2.send(());
            }))
            .expect("run");
        finished.recv_timeout(Duration::from_secs(5)).expect("ran");
        let shared = threads.shared.clone();
        drop(threads);
        for _ in 0..500 {
            if lock(&shared.queue).started == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the threads did not end");
    }
}
