// The "jitccl" backend as a C++ c10d::Backend (built at first use by _native.py against the
// PyTorch it runs in). The hot calls on CPU tensors run here, through the C API's function
// pointers, without Python: all_reduce and broadcast of one contiguous tensor of a type
// jitccl has, and barrier. Every other call, and these in any other form, is handed to the
// Python group (ProcessGroupJitccl), which keeps every other rule: held sends and receives,
// staging, CUDA, errors. The ranks' agreement on a call is the library's (jitcclAgree), which
// both call with the same names, so a rank on this path and a rank on the Python one agree or
// refuse alike. Both run their calls as jobs of the library's process group (jitccl.h, the
// runtime's c10d-style group: queued on the caller's thread, a watchdog past the group's
// timeout), whose works are the Works they return.
#include <Python.h>

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

namespace py = pybind11;
using Tensors = std::vector<at::Tensor>;
using c10::intrusive_ptr;
using c10d::Work;

// The C API's calls, as the Python package's ctypes loaded them (one library in the process).
// ncclAllReduce and ncclBroadcast: (send, recv, count, type, op or root, comm, stream).
using RootedFn = int(const void*, void*, size_t, int, int, void*, void*);
// jitcclCall_t and jitcclAgree (jitccl.h).
struct Call {
  const char* operation;
  const char* type;
  const size_t* counts;
  size_t ncounts;
  int root;
  const char* reduction;
  const void* wire;
};
using AgreeFn = int(const Call*, char*, size_t, void*);
// The process group's (jitccl.h): jitcclProcessGroupSubmit, jitcclWorkWait,
// jitcclWorkIsCompleted, jitcclWorkError, jitcclWorkRelease.
using JobFn = int(void*);
using SubmitFn = int(void*, const char*, int, JobFn*, void*, void**);
using WaitFn = int(void*, int64_t);
using DoneFn = int(void*, int*);
using ErrorFn = int(void*, char*, size_t*);
using ReleaseFn = int(void*);
struct Api {
  RootedFn* all_reduce;
  RootedFn* broadcast;
  AgreeFn* agree;
  SubmitFn* submit;
  WaitFn* wait;
  DoneFn* done;
  ErrorFn* error;
  ReleaseFn* release;
};

constexpr int kInProgress = 7;  // ncclInProgress: a success on a blocking communicator
constexpr size_t kRefusalBytes = 4096;

// What the Works of a group need after its calls returned (they may outlive the backend).
struct Context {
  Api api;
  std::string where;                   // "on rank R of N in group 'name'", as the Python group says it
  std::array<std::string, 16> kinds;   // by ncclResult_t: the name of jitccl.errors' class
};

// What the Python group shares with this one, all set up by _native.py.
struct Shared {
  void* comm;               // the group's host communicator
  void* pg;                 // the process group over it (jitcclProcessGroup_t)
  char* scratch;            // its scratch in the host arena (small all_reduces)
  int* scratch_busy;        // nonzero while a call's Work holds the scratch
  int64_t scratch_bytes;
  const int* held;          // nonzero while sends or receives are held (every group's)
  const int* closed;        // nonzero once the Python group is shut down or aborted
  std::array<int, 64> nccl_type{};  // by at::ScalarType: ncclDataType_t, -1 when not direct
  std::array<std::string, 64> type_name{};  // by at::ScalarType: the name the ranks compare
  std::array<int, 16> nccl_op{};             // by RedOpType: ncclRedOp_t, -1 when not direct
  std::array<std::string, 16> op_name{};     // by RedOpType: the name the ranks compare
};

// Whether Python objects may be let go of here (not once the interpreter is ending).
bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// Lets go of `o`: with the GIL while Python runs, else leaks it (nothing to give back to).
void let_go(py::object& o) {
  if (python_alive()) {
    py::gil_scoped_acquire gil;
    o = py::object();
  } else {
    o.release();
  }
}

// A Work of the Python group's (a held send or receive, a call's work in the process group),
// a Python object (torch's trampoline Work forwards only wait and get_future to Python):
// holds it, and asks it.
class PyWork : public Work {
 public:
  PyWork(py::object owner, intrusive_ptr<Work> inner) : owner_(std::move(owner)), inner_(std::move(inner)) {}
  ~PyWork() override { let_go(owner_); }
  bool isCompleted() override { return ask("is_completed"); }
  bool isSuccess() const override { return ask("is_success"); }
  std::exception_ptr exception() const override {
    py::gil_scoped_acquire gil;
    py::object e = owner_.attr("exception")();
    if (e.is_none()) return nullptr;
    return std::make_exception_ptr(
        c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, py::str(e).cast<std::string>()));
  }
  Tensors result() override {
    py::gil_scoped_acquire gil;
    return owner_.attr("result")().cast<Tensors>();
  }
  bool wait(std::chrono::milliseconds timeout) override { return inner_->wait(timeout); }
  intrusive_ptr<c10::ivalue::Future> getFuture() override { return inner_->getFuture(); }

 private:
  bool ask(const char* name) const {
    py::gil_scoped_acquire gil;
    return owner_.attr(name)().cast<bool>();
  }

  py::object owner_;
  intrusive_ptr<Work> inner_;
};

// A call's Work: the process group's work (jitccl.h), whose completion, wait and error it
// reports; once the work has ended well, `finish` copies the result out of the scratch.
class PgWork : public Work {
 public:
  using Finish = std::function<void()>;
  PgWork(std::shared_ptr<const Context> ctx, void* work, const char* op, Tensors result, Finish finish,
         int* scratch_busy)
      : Work(-1, c10d::OpType::UNKNOWN), ctx_(std::move(ctx)), work_(work), op_(op), result_(std::move(result)),
        finish_(std::move(finish)), busy_(scratch_busy) {}

  ~PgWork() override {
    // The scratch is free for the next call only once this work's result left it.
    if (busy_ != nullptr && !settled()) settle(ctx_->api.wait(work_, -1));
    ctx_->api.release(work_);
  }

  bool isCompleted() override {
    int done = 0;
    if (!settled() && ctx_->api.done(work_, &done) == 0 && done) settle(ctx_->api.wait(work_, 0));
    return settled();
  }
  bool isSuccess() const override {
    const_cast<PgWork*>(this)->isCompleted();
    std::lock_guard<std::mutex> g(mu_);
    return settled_ && !error_;
  }
  std::exception_ptr exception() const override {
    const_cast<PgWork*>(this)->isCompleted();
    std::lock_guard<std::mutex> g(mu_);
    return error_;
  }
  // c10d's kNoTimeout (0): until the work ends, which the group's watchdog bounds.
  bool wait(std::chrono::milliseconds timeout) override {
    const int64_t ms = timeout.count() == 0 ? -1 : static_cast<int64_t>(timeout.count());
    const int code = ctx_->api.wait(work_, ms);
    if (code == kInProgress) {
      C10_THROW_ERROR(DistBackendError, "jitccl backend: " + std::string(op_) + " " + ctx_->where +
                                            ": wait gave up after " + std::to_string(ms) +
                                            " ms; the operation is still pending");
    }
    settle(code);
    std::lock_guard<std::mutex> g(mu_);
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  // Complete once the work is: waited for here (DDP chains its steps on it).
  intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::exception_ptr e;
    try {
      wait(std::chrono::milliseconds(0));
    } catch (...) {
      e = std::current_exception();
    }
    auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    if (e) {
      fut->setError(e);
    } else {
      fut->markCompleted(c10::IValue(result_));
    }
    return fut;
  }
  Tensors result() override { return result_; }

  // Runs the work to its end now, on this thread; its failure is thrown by wait().
  void run() { settle(ctx_->api.wait(work_, -1)); }

 private:
  bool settled() const {
    std::lock_guard<std::mutex> g(mu_);
    return settled_;
  }

  // Once, with the ended work's result code: the result copied out, or the error made.
  void settle(int code) {
    std::lock_guard<std::mutex> g(mu_);
    if (settled_) return;
    settled_ = true;
    if (code == 0) {
      if (finish_) finish_();
    } else {
      std::array<char, 2048> text{};
      size_t len = text.size();
      ctx_->api.error(work_, text.data(), &len);
      const size_t k = static_cast<size_t>(code) < ctx_->kinds.size() ? static_cast<size_t>(code) : 0;
      error_ = std::make_exception_ptr(c10::DistBackendError(
          {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
          "jitccl backend: " + std::string(op_) + " failed " + ctx_->where + ": " + ctx_->kinds[k] + ": " +
              text.data()));
    }
    if (busy_ != nullptr) __atomic_store_n(busy_, 0, __ATOMIC_RELEASE);
  }

  std::shared_ptr<const Context> ctx_;
  void* work_;
  const char* op_;
  Tensors result_;
  Finish finish_;
  int* busy_;
  mutable std::mutex mu_;
  bool settled_ = false;
  std::exception_ptr error_;
};

// A rooted call (ncclAllReduce, ncclBroadcast) as a job of the process group.
struct RootedJob {
  RootedFn* fn;
  const void* send;
  void* recv;
  size_t count;
  int type;
  int op_or_root;
  void* comm;
};

int run_rooted(void* arg) {
  const auto* j = static_cast<const RootedJob*>(arg);
  return j->fn(j->send, j->recv, j->count, j->type, j->op_or_root, j->comm, nullptr);
}

int run_nothing(void*) { return 0; }

class Native : public c10d::Backend {
 public:
  Native(int rank, int size, py::object group, const Shared& shared, std::shared_ptr<const Context> ctx)
      : Backend(rank, size), group_(std::move(group)), s_(shared), api_(ctx->api), ctx_(std::move(ctx)) {
    init();
  }

  ~Native() override { let_go(group_); }

  const std::string getBackendName() const override { return "jitccl"; }

  py::object group() const { return group_; }

  // ---- The calls run here -----------------------------------------------------------------

  intrusive_ptr<Work> allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    const int op = opts.reduceOp.op_ < s_.nccl_op.size() ? s_.nccl_op[opts.reduceOp.op_] : -1;
    const int type = direct_type(tensors);
    if (op < 0 || type < 0) return forward("allreduce", tensors, opts);
    at::Tensor& t = tensors[0];
    const int64_t n = t.numel();
    agree("allreduce", &t, -1, s_.op_name[opts.reduceOp.op_].c_str());
    const size_t bytes = static_cast<size_t>(n) * t.element_size();
    RootedJob job{api_.all_reduce, t.data_ptr(), t.data_ptr(), static_cast<size_t>(n), type, op, s_.comm};
    PgWork::Finish finish;
    int* busy = nullptr;
    // Through the scratch in the host arena, which the peers read in place, unless a Work
    // not yet ended holds it.
    if (static_cast<int64_t>(bytes) <= s_.scratch_bytes &&
        __atomic_exchange_n(s_.scratch_busy, 1, __ATOMIC_ACQ_REL) == 0) {
      busy = s_.scratch_busy;
      if (bytes) std::memcpy(s_.scratch, t.data_ptr(), bytes);
      job.send = job.recv = s_.scratch;
      finish = [scratch = s_.scratch, to = t.data_ptr(), bytes] {
        if (bytes) std::memcpy(to, scratch, bytes);
      };
    }
    return submit("allreduce", &run_rooted, &job, tensors, std::move(finish), busy);
  }

  intrusive_ptr<Work> broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    const int type = direct_type(tensors);
    if (type < 0 || opts.rootRank < 0 || opts.rootRank >= size_) return forward("broadcast", tensors, opts);
    at::Tensor& t = tensors[0];
    const int64_t n = t.numel();
    agree("broadcast", &t, static_cast<int>(opts.rootRank), nullptr);
    RootedJob job{api_.broadcast, t.data_ptr(), t.data_ptr(), static_cast<size_t>(n), type,
                  static_cast<int>(opts.rootRank), s_.comm};
    return submit("broadcast", &run_rooted, &job, tensors, nullptr, nullptr);
  }

  // The ranks' agreement is the barrier (an all-gather after every call queued before).
  intrusive_ptr<Work> barrier(const c10d::BarrierOptions& opts) override {
    if (python_path()) return forward("barrier", opts);
    agree("barrier", nullptr, -1, nullptr);
    return submit("barrier", &run_nothing, nullptr, Tensors{}, nullptr, nullptr);
  }

  // ---- The calls handed to the Python group -------------------------------------------------

  intrusive_ptr<Work> allreduce_coalesced(Tensors& t, const c10d::AllreduceCoalescedOptions& o) override {
    return forward("allreduce_coalesced", t, o);
  }
  intrusive_ptr<Work> reduce(Tensors& t, const c10d::ReduceOptions& o) override { return forward("reduce", t, o); }
  intrusive_ptr<Work> allgather(std::vector<Tensors>& out, Tensors& in, const c10d::AllgatherOptions& o) override {
    return forward("allgather", out, in, o);
  }
  intrusive_ptr<Work> _allgather_base(at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions& o) override {
    return forward("_allgather_base", out, in, o);
  }
  intrusive_ptr<Work> allgather_coalesced(std::vector<Tensors>& out, Tensors& in,
                                          const c10d::AllgatherOptions& o) override {
    return forward("allgather_coalesced", out, in, o);
  }
  intrusive_ptr<Work> allgather_into_tensor_coalesced(Tensors& out, Tensors& in,
                                                      const c10d::AllgatherOptions& o) override {
    return forward("allgather_into_tensor_coalesced", out, in, o);
  }
  intrusive_ptr<Work> gather(std::vector<Tensors>& out, Tensors& in, const c10d::GatherOptions& o) override {
    return forward("gather", out, in, o);
  }
  intrusive_ptr<Work> scatter(Tensors& out, std::vector<Tensors>& in, const c10d::ScatterOptions& o) override {
    return forward("scatter", out, in, o);
  }
  intrusive_ptr<Work> reduce_scatter(Tensors& out, std::vector<Tensors>& in,
                                     const c10d::ReduceScatterOptions& o) override {
    return forward("reduce_scatter", out, in, o);
  }
  intrusive_ptr<Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                           const c10d::ReduceScatterOptions& o) override {
    return forward("_reduce_scatter_base", out, in, o);
  }
  intrusive_ptr<Work> reduce_scatter_tensor_coalesced(Tensors& out, Tensors& in,
                                                      const c10d::ReduceScatterOptions& o) override {
    return forward("reduce_scatter_tensor_coalesced", out, in, o);
  }
  intrusive_ptr<Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                    std::vector<int64_t>& in_splits, const c10d::AllToAllOptions& o) override {
    return forward("alltoall_base", out, in, out_splits, in_splits, o);
  }
  intrusive_ptr<Work> alltoall(Tensors& out, Tensors& in, const c10d::AllToAllOptions& o) override {
    return forward("alltoall", out, in, o);
  }
  intrusive_ptr<Work> send(Tensors& t, int dst, int tag) override { return forward_held("send", t, dst, tag); }
  intrusive_ptr<Work> recv(Tensors& t, int src, int tag) override { return forward_held("recv", t, src, tag); }
  intrusive_ptr<Work> recvAnysource(Tensors& t, int tag) override { return forward("recv_anysource", t, tag); }
  void startCoalescing() override {
    py::gil_scoped_acquire gil;
    group_.attr("_start_coalescing")(py::none());
  }
  intrusive_ptr<Work> endCoalescing() override { return forward("_end_coalescing"); }

  // The Python group's: they end its communicators (later calls here go to it, which
  // refuses them). Not marked override: Backend has them as virtuals only from torch 2.7 on,
  // where ProcessGroup's shutdown and abort reach them.
  void shutdown() { call("shutdown"); }
  void abort() { call("abort"); }

 private:
  static size_t idx(const at::Tensor& t) { return static_cast<size_t>(t.scalar_type()); }

  // Whether a call must go through the Python group: sends or receives are held (they run
  // first, in order), or the group was ended (its error comes from there).
  bool python_path() const {
    return __atomic_load_n(s_.held, __ATOMIC_RELAXED) != 0 || __atomic_load_n(s_.closed, __ATOMIC_RELAXED) != 0;
  }

  // The ncclDataType_t of a one-tensor call that runs here, or -1.
  int direct_type(const Tensors& tensors) const {
    if (tensors.size() != 1 || python_path()) return -1;
    const at::Tensor& t = tensors[0];
    if (!t.defined() || t.device().type() != c10::DeviceType::CPU || t.layout() != c10::kStrided ||
        !t.is_contiguous() || idx(t) >= s_.nccl_type.size())
      return -1;
    return s_.nccl_type[idx(t)];
  }

  // The ranks' agreement on a call of one tensor `t` (none: a barrier), named as the Python
  // group names it.
  void agree(const char* op, const at::Tensor* t, int root, const char* reduction) {
    const size_t count = t != nullptr ? static_cast<size_t>(t->numel()) : 0;
    const Call call{op, t != nullptr ? s_.type_name[idx(*t)].c_str() : nullptr, &count, t != nullptr ? 1u : 0u,
                    root, reduction, nullptr};
    const int code = api_.agree(&call, refusal_.data(), refusal_.size(), s_.comm);
    if (code != 0) fail("_native_failure", std::string(op) + " (checking that the ranks agree on it)", code);
    if (refusal_[0] != '\0') {
      std::string text;
      {
        py::gil_scoped_acquire gil;
        text = group_.attr("_native_refusal")(op, std::string(refusal_.data())).cast<std::string>();
      }
      C10_THROW_ERROR(DistBackendError, text);
    }
  }

  // Runs `job(arg)` as the process group's next operation and its launch to its end, on
  // this thread: on the host the launch is the run (as a GPU's is its queuing), and a launch
  // left queued until the caller's wait would be taken by the stream's thread whenever the
  // caller is slow to come back (a hand-off, and a thread competing for the caller's core).
  // The group's watchdog watches it meanwhile; its Work reports how it ended.
  intrusive_ptr<Work> submit(const char* op, JobFn* job, void* arg, const Tensors& result, PgWork::Finish finish,
                             int* busy) {
    void* work = nullptr;
    const int code = api_.submit(s_.pg, op, -1, job, arg, &work);
    if (code != 0) {
      if (busy != nullptr) __atomic_store_n(busy, 0, __ATOMIC_RELEASE);
      fail("_native_failure", op, code);
    }
    auto w = c10::make_intrusive<PgWork>(ctx_, work, op, result, std::move(finish), busy);
    w->run();
    return w;
  }

  // Raises the Python group's DistBackendError text for a failed or refused call.
  [[noreturn]] void fail(const char* how, const std::string& op, int code) {
    std::string text;
    {
      py::gil_scoped_acquire gil;
      text = group_.attr(how)(op, code).cast<std::string>();
    }
    C10_THROW_ERROR(DistBackendError, text);
  }

  void call(const char* name) {
    py::gil_scoped_acquire gil;
    group_.attr(name)();
  }

  // The Python group's call; a Work of Python's (a held send or receive, a call's work in
  // the process group) is asked through its Python object.
  template <typename... Args>
  intrusive_ptr<Work> forward(const char* name, Args&&... args) {
    py::gil_scoped_acquire gil;
    py::object work = group_.attr(name)(std::forward<Args>(args)...);
    auto inner = work.cast<intrusive_ptr<Work>>();
    if (!py::hasattr(work, "_asks_python")) return inner;
    return c10::make_intrusive<PyWork>(std::move(work), std::move(inner));
  }

  intrusive_ptr<Work> forward_held(const char* name, Tensors& t, int peer, int tag) {
    return forward(name, t, peer, tag);
  }

  py::object group_;
  Shared s_;
  Api api_;
  std::shared_ptr<const Context> ctx_;
  std::array<char, kRefusalBytes> refusal_{};
};

template <typename T>
T* address(int64_t a) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(a));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "jitccl's c10d::Backend in C++ (see _native.py)";
  py::class_<Native, c10d::Backend, intrusive_ptr<Native>>(m, "NativeBackend")
      .def(py::init([](int rank, int size, py::object group, py::dict shared) {
             Shared s{};
             s.comm = address<void>(shared["comm"].cast<int64_t>());
             s.pg = address<void>(shared["pg"].cast<int64_t>());
             s.scratch = address<char>(shared["scratch"].cast<int64_t>());
             s.scratch_busy = address<int>(shared["scratch_busy"].cast<int64_t>());
             s.scratch_bytes = shared["scratch_bytes"].cast<int64_t>();
             s.held = address<const int>(shared["held"].cast<int64_t>());
             s.closed = address<const int>(shared["closed"].cast<int64_t>());
             s.nccl_type.fill(-1);
             // (a tensor of the type, ncclDataType_t, the name the ranks compare) for each direct type
             for (auto row : shared["types"].cast<py::list>()) {
               auto [t, nccl, name] = row.cast<std::tuple<at::Tensor, int, std::string>>();
               s.nccl_type.at(static_cast<size_t>(t.scalar_type())) = nccl;
               s.type_name.at(static_cast<size_t>(t.scalar_type())) = name;
             }
             s.nccl_op.fill(-1);
             for (auto row : shared["ops"].cast<py::list>()) {
               auto [kind, nccl, name] = row.cast<std::tuple<int, int, std::string>>();
               s.nccl_op.at(static_cast<size_t>(kind)) = nccl;
               s.op_name.at(static_cast<size_t>(kind)) = name;
             }
             auto ctx = std::make_shared<Context>();
             ctx->api = Api{address<RootedFn>(shared["ncclAllReduce"].cast<int64_t>()),
                            address<RootedFn>(shared["ncclBroadcast"].cast<int64_t>()),
                            address<AgreeFn>(shared["jitcclAgree"].cast<int64_t>()),
                            address<SubmitFn>(shared["jitcclProcessGroupSubmit"].cast<int64_t>()),
                            address<WaitFn>(shared["jitcclWorkWait"].cast<int64_t>()),
                            address<DoneFn>(shared["jitcclWorkIsCompleted"].cast<int64_t>()),
                            address<ErrorFn>(shared["jitcclWorkError"].cast<int64_t>()),
                            address<ReleaseFn>(shared["jitcclWorkRelease"].cast<int64_t>())};
             ctx->where = shared["where"].cast<std::string>();
             for (auto row : shared["kinds"].cast<py::list>()) {
               auto [code, name] = row.cast<std::tuple<int, std::string>>();
               ctx->kinds.at(static_cast<size_t>(code)) = name;
             }
             return c10::make_intrusive<Native>(rank, size, std::move(group), s, std::move(ctx));
           }),
           py::arg("rank"), py::arg("size"), py::arg("group"), py::arg("shared"))
      .def_property_readonly("python_group", &Native::group, "the ProcessGroupJitccl that serves the other calls")
      .def("shutdown", &Native::shutdown, "frees the group's communicators now")
      .def("abort", &Native::abort, "ends the group's communicators at once, from any thread");
}
