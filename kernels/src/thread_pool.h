// Persistent worker threads for the kernels' row chunks (used by dispatch.cpp).
#pragma once

#include <cstdint>

namespace fp4lab::kernels {

using ChunkFn = void (*)(void* ctx, int64_t chunk);

// Calls fn(ctx, c) once for every c in [0, chunks) on min(threads, chunks) threads, the calling
// thread included, and returns when all calls are done. Chunks go out through an atomic counter,
// so which thread runs a chunk varies but never what a chunk computes.
//
// The pool starts lazily, keeps threads - 1 workers parked on a condition variable between calls
// and restarts them when `threads` changes. It runs one job at a time: a call that finds it busy
// (another user thread's job, or a call from inside a chunk) runs all its chunks on its own
// thread instead of waiting. An exception thrown by a chunk stops the handing out of chunks and
// is rethrown to the caller once every running chunk has returned.
void runChunks(int threads, int64_t chunks, ChunkFn fn, void* ctx);

}  // namespace fp4lab::kernels
