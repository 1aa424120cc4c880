// The "jitccl" backend as a C++ c10d::Backend (built at first use by _native.py against the
// PyTorch it runs in). The hot calls on CPU tensors run here, through the C API's function
// pointers, without Python: all_reduce and broadcast of one contiguous tensor of a type
// jitccl has, and barrier. Every other call, and these in any other form, is handed to the
// Python group (ProcessGroupJitccl), which keeps every other rule: held sends and receives,
// staging, CUDA, errors. The ranks' agreement on a call is the library's (jitcclAgree), which
// both call with the same names, so a rank on this path and a rank on the Python one agree or
// refuse alike. Both run their calls as jobs of the library's process group (jitccl.h, the
// runtime's c10d-style group: queued on the caller's thread, a watchdog past the group's
// timeout), whose works their Works report; a failed work's text is the Python group's.
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
// The process group's (jitccl.h): jitcclProcessGroupSubmit, jitcclWorkWait, jitcclWorkError,
// jitcclWorkRelease.
using JobFn = int(void*);
using SubmitFn = int(void*, const char*, int, JobFn*, void*, void**);
using WaitFn = int(void*, int64_t);
using ErrorFn = int(void*, char*, size_t*);
using ReleaseFn = int(void*);
struct Api {
  RootedFn* all_reduce;
  RootedFn* broadcast;
  AgreeFn* agree;
  SubmitFn* submit;
  WaitFn* wait;
  ErrorFn* error;
  ReleaseFn* release;
};

constexpr size_t kRefusalBytes = 4096;

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

// A call's Work, made once its work in the process group (jitccl.h) has ended (see
// Native::submit): its result, or its error.
class PgWork : public Work {
 public:
  PgWork(Tensors result, std::exception_ptr error)
      : Work(-1, c10d::OpType::UNKNOWN), result_(std::move(result)), error_(std::move(error)) {}

  bool isCompleted() override { return true; }
  bool isSuccess() const override { return !error_; }
  std::exception_ptr exception() const override { return error_; }
  bool wait(std::chrono::milliseconds) override {
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    if (error_) {
      fut->setError(error_);
    } else {
      fut->markCompleted(c10::IValue(result_));
    }
    return fut;
  }
  Tensors result() override { return result_; }

 private:
  Tensors result_;
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
  Native(int rank, int size, py::object group, const Shared& shared, const Api& api)
      : Backend(rank, size), group_(std::move(group)), s_(shared), api_(api) {
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
    std::function<void()> finish;
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
    return submit("allreduce", &run_rooted, &job, tensors, finish, busy);
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
  // The group's watchdog watches it meanwhile; its Work reports how it ended. Once it has
  // ended well, `finish` copies the result out of the scratch, which `busy` then frees.
  intrusive_ptr<Work> submit(const char* op, JobFn* job, void* arg, const Tensors& result,
                             const std::function<void()>& finish, int* busy) {
    void* work = nullptr;
    const int code = api_.submit(s_.pg, op, -1, job, arg, &work);
    if (code != 0) {
      if (busy != nullptr) __atomic_store_n(busy, 0, __ATOMIC_RELEASE);
      fail("_native_failure", op, code);
    }
    const int ended = api_.wait(work, -1);
    std::exception_ptr error;
    if (ended != 0) {
      error = std::make_exception_ptr(c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                                            work_failure(op, ended, work)));
    } else if (finish) {
      finish();
    }
    api_.release(work);
    if (busy != nullptr) __atomic_store_n(busy, 0, __ATOMIC_RELEASE);
    return c10::make_intrusive<PgWork>(result, std::move(error));
  }

  // The Python group's text for a failed work (the library's text names the rank and the
  // operation), read with a size query first.
  std::string work_failure(const char* op, int code, void* work) {
    std::string text;
    size_t len = 0;
    if (api_.error(work, nullptr, &len) == 0 && len > 0) {
      text.resize(len);
      if (api_.error(work, text.data(), &len) == 0) {
        text.resize(len - 1);
      } else {
        text.clear();
      }
    }
    py::gil_scoped_acquire gil;
    return group_.attr("_native_work_failure")(op, code, text).cast<std::string>();
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
             const Api api{address<RootedFn>(shared["ncclAllReduce"].cast<int64_t>()),
                           address<RootedFn>(shared["ncclBroadcast"].cast<int64_t>()),
                           address<AgreeFn>(shared["jitcclAgree"].cast<int64_t>()),
                           address<SubmitFn>(shared["jitcclProcessGroupSubmit"].cast<int64_t>()),
                           address<WaitFn>(shared["jitcclWorkWait"].cast<int64_t>()),
                           address<ErrorFn>(shared["jitcclWorkError"].cast<int64_t>()),
                           address<ReleaseFn>(shared["jitcclWorkRelease"].cast<int64_t>())};
             return c10::make_intrusive<Native>(rank, size, std::move(group), s, api);
           }),
           py::arg("rank"), py::arg("size"), py::arg("group"), py::arg("shared"))
      .def_property_readonly("python_group", &Native::group, "the ProcessGroupJitccl that serves the other calls")
      .def("shutdown", &Native::shutdown, "frees the group's communicators now")
      .def("abort", &Native::abort, "ends the group's communicators at once, from any thread");
}
