#include "thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace fp4lab::kernels {
namespace {

class Pool {
 public:
  // Runs the job on the pool; false (having run nothing) when another job holds it.
  bool tryRun(int threads, int64_t chunks, ChunkFn fn, void* ctx) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    resize(threads - 1);
    {
      std::lock_guard<std::mutex> lock(m_);
      fn_ = fn, ctx_ = ctx, chunks_ = chunks, error_ = nullptr;
      next_.store(0);
      helpers_ = int(std::min<int64_t>(threads, chunks)) - 1;
      running_ = helpers_;
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(m_);
    done_.wait(lock, [&] { return running_ == 0; });
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  // Takes chunks until none is left. Runs on the caller and on the job's helpers.
  void work() {
    for (int64_t c; (c = next_.fetch_add(1)) < chunks_;) {
      try {
        fn_(ctx_, c);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m_);
        if (!error_) error_ = std::current_exception();
        next_.store(chunks_);  // hand out no more chunks
      }
    }
  }

  void loop(int index, uint64_t seen) {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= helpers_) continue;  // a job of fewer chunks than threads
      lock.unlock();
      work();
      lock.lock();
      if (--running_ == 0) done_.notify_one();
    }
  }

  // Called with busy_ held, so no job is running.
  void resize(int workers) {
    if (workers_.size() == size_t(workers)) return;
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    stop_ = false;  // no worker is left to read it
    for (int i = 0; i < workers; ++i) workers_.emplace_back(&Pool::loop, this, i, generation_);
  }

  std::mutex busy_;  // held by the caller whose job is on the pool
  std::vector<std::thread> workers_;
  std::mutex m_;  // guards what follows, except the job's fields while it runs (set before)
  std::condition_variable wake_, done_;
  uint64_t generation_ = 0;  // one more for every job
  bool stop_ = false;
  int helpers_ = 0;  // workers taking part in the current job: those of index < helpers_
  int running_ = 0;  // helpers that have not finished the current job
  ChunkFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t chunks_ = 0;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;
};

}  // namespace

void runChunks(int threads, int64_t chunks, ChunkFn fn, void* ctx) {
  if (threads > 1 && chunks > 1) {
    // Never destroyed: at exit its workers stay parked and no static destructor joins them.
    static Pool* pool = new Pool;
    if (pool->tryRun(threads, chunks, fn, ctx)) return;
  }
  for (int64_t c = 0; c < chunks; ++c) fn(ctx, c);
}

}  // namespace fp4lab::kernels
