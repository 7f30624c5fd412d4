//! A small facade over the synchronisation primitives the commit protocol uses, so that the very
//! same code runs on parking_lot/std in production and on loom's model-checked types under
//! `RUSTFLAGS="--cfg loom"`. parking_lot is invisible to loom; everything that takes part in the
//! lock-free commit protocol must import its primitives from here.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

/// A mutex with parking_lot's guard-returning API on both backends.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(
    #[cfg(loom)] loom::sync::Mutex<T>,
    #[cfg(not(loom))] parking_lot::Mutex<T>,
);

#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(loom)]
        return Mutex(loom::sync::Mutex::new(value));
        #[cfg(not(loom))]
        return Mutex(parking_lot::Mutex::new(value));
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(loom)]
        return self
            .0
            .lock()
            .expect("invariant: no thread panics while holding a commit-protocol mutex");
        #[cfg(not(loom))]
        return self.0.lock();
    }
}

/// A condition variable paired with [`Mutex`].
#[derive(Debug, Default)]
pub(crate) struct Condvar(
    #[cfg(loom)] loom::sync::Condvar,
    #[cfg(not(loom))] parking_lot::Condvar,
);

impl Condvar {
    pub(crate) fn new() -> Self {
        #[cfg(loom)]
        return Condvar(loom::sync::Condvar::new());
        #[cfg(not(loom))]
        return Condvar(parking_lot::Condvar::new());
    }

    /// Blocks until notified; the caller re-checks its condition in a loop.
    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        #[cfg(loom)]
        return self
            .0
            .wait(guard)
            .expect("invariant: no thread panics while holding a commit-protocol mutex");
        #[cfg(not(loom))]
        {
            let mut guard = guard;
            self.0.wait(&mut guard);
            guard
        }
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// Interior mutability whose accesses loom can check for data races.
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
);

impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(loom)]
        return UnsafeCell(loom::cell::UnsafeCell::new(value));
        #[cfg(not(loom))]
        return UnsafeCell(std::cell::UnsafeCell::new(value));
    }

    /// # Safety
    /// The caller guarantees that no other thread accesses the cell at the same time.
    pub(crate) unsafe fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with_mut(f);
        #[cfg(not(loom))]
        return f(self.0.get());
    }
}

/// What a waiter does between two looks at a flag before it parks: a CPU hint in production, a
/// scheduling point under loom (which would otherwise explore an endless spin).
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Gives the CPU away; under loom a scheduling point like [`spin_hint`].
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}
