//! Taking a lock whose last holder panicked. The daemons' locks guard state
//! that is whole between statements (maps, counters, a connection between
//! transactions): a panic elsewhere cannot leave it half-changed, so a
//! poisoned lock is taken as it is rather than spreading the panic.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `mutex` locked, poisoned or not.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `rwlock` read-locked, poisoned or not.
pub fn read<T: ?Sized>(rwlock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    rwlock
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `rwlock` write-locked, poisoned or not.
pub fn write<T: ?Sized>(rwlock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    rwlock
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_taken_with_its_data() {
        let mutex = std::sync::Arc::new(Mutex::new(1));
        let rwlock = std::sync::Arc::new(RwLock::new(2));
        let (m, r) = (mutex.clone(), rwlock.clone());
        let _ = std::thread::spawn(move || {
            let _held = m.lock().unwrap();
            let _written = r.write().unwrap();
            panic!("poisoning both on purpose");
        })
        .join();
        assert!(mutex.is_poisoned() && rwlock.is_poisoned());
        *lock(&mutex) += 1;
        assert_eq!(*lock(&mutex), 2);
        *write(&rwlock) += 1;
        assert_eq!(*read(&rwlock), 3);
    }
}
