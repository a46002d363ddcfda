// Clang thread-safety analysis attributes (-Wthread-safety), as abseil's thread_annotations.h.
//
// They state which mutex guards a member and which lock a function needs, so that the compiler
// checks it: scripts/check-thread-safety.sh compiles every translation unit with clang and
// -Werror=thread-safety. Under GCC and nvcc the macros expand to nothing.
//
//   SY_GUARDED_BY(mu)            on a member: read or written only with mu held
//   SY_PT_GUARDED_BY(mu)         on a pointer member: the pointee is read or written with mu held
//   SY_REQUIRES(mu...)           on a function: the caller holds mu (the "...Locked" helpers)
//   SY_REQUIRES_SHARED(mu...)    on a function: the caller holds mu at least shared (readers)
//   SY_EXCLUDES(mu...)           on a function: the caller must not hold mu (the function takes it)
//   SY_ACQUIRE(mu...) / SY_RELEASE(mu...) / SY_TRY_ACQUIRE(ok, mu...)
//                                on a function: it locks / unlocks mu (no argument: `this`)
//   SY_ACQUIRE_SHARED(mu...) / SY_RELEASE_SHARED(mu...)
//                                the same for a shared (reader) hold of a SharedMutex
//   SY_ASSERT_HELD(mu)           on a function: it checks at run time that mu is held
//   SY_RETURN_CAPABILITY(mu)     on a function: it returns a reference to mu
//   SY_CAPABILITY(name)          on a class: it is a lock (sy::Mutex)
//   SY_SCOPED_CAPABILITY         on a class: it holds a lock for its lifetime (sy::MutexLock)
//   SY_NO_THREAD_SAFETY_ANALYSIS on a function: not checked; say why beside it
//
// The guarded members' mutexes are sy::Mutex or sy::SharedMutex (runtime/core/mutex.h):
// libstdc++'s std::mutex carries no attributes, so the analysis cannot see it lock.
#pragma once

#if defined(__clang__)
#define SY_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define SY_THREAD_ANNOTATION_(x)
#endif

#define SY_CAPABILITY(name) SY_THREAD_ANNOTATION_(capability(name))
#define SY_SCOPED_CAPABILITY SY_THREAD_ANNOTATION_(scoped_lockable)
#define SY_GUARDED_BY(mu) SY_THREAD_ANNOTATION_(guarded_by(mu))
#define SY_PT_GUARDED_BY(mu) SY_THREAD_ANNOTATION_(pt_guarded_by(mu))
#define SY_REQUIRES(...) SY_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define SY_REQUIRES_SHARED(...) SY_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
#define SY_EXCLUDES(...) SY_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define SY_ACQUIRE(...) SY_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define SY_RELEASE(...) SY_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define SY_ACQUIRE_SHARED(...) SY_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#define SY_RELEASE_SHARED(...) SY_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
#define SY_TRY_ACQUIRE(...) SY_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#define SY_ASSERT_HELD(mu) SY_THREAD_ANNOTATION_(assert_capability(mu))
#define SY_RETURN_CAPABILITY(mu) SY_THREAD_ANNOTATION_(lock_returned(mu))
#define SY_NO_THREAD_SAFETY_ANALYSIS SY_THREAD_ANNOTATION_(no_thread_safety_analysis)
