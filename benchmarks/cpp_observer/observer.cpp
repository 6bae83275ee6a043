// A recorder's per-op work done in C++, as a measurement: on every op, torch's
// RecordFunction hook hands this observer the op's inputs (before it runs) and
// outputs (after), and it freezes what gpu_demo.guard.record.recorder freezes for each tensor
// (identity, data pointer, storage block and bytes, numel, shape, bytes) and the
// current stream, into a log. Nothing reads the log but the counts: measure.py
// times passes with it on, to show what the recorder would cost below Python.
#include <torch/extension.h>
#include <ATen/record_function.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace {

struct Frozen {
  uintptr_t tensor, ptr, block;
  int64_t block_nbytes, numel, nbytes;
  c10::SmallVector<int64_t, 5> shape;
};

struct Entry {
  const char* op;
  int64_t stream;   // -1: no CUDA, or an op's end
  int depth;        // ops an op calls through the dispatcher are deeper
  bool end;
  std::vector<Frozen> tensors;
};

std::vector<Entry> log_;
thread_local int depth_ = 0;
at::CallbackHandle handle_ = 0;
bool cuda_ = false;

void freeze(const at::Tensor& t, std::vector<Frozen>& out) {
  if (!t.defined() || !t.has_storage()) return;
  const c10::Storage& storage = t.storage();
  Frozen f{reinterpret_cast<uintptr_t>(t.unsafeGetTensorImpl()), reinterpret_cast<uintptr_t>(t.const_data_ptr()),
           reinterpret_cast<uintptr_t>(storage.data()), static_cast<int64_t>(storage.nbytes()), t.numel(),
           static_cast<int64_t>(t.nbytes()), {}};
  f.shape.assign(t.sizes().begin(), t.sizes().end());
  out.push_back(std::move(f));
}

void freeze_all(c10::ArrayRef<const c10::IValue> values, std::vector<Frozen>& out) {
  for (const c10::IValue& v : values) {
    if (v.isTensor()) {
      freeze(v.toTensor(), out);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) freeze(t, out);
    }
  }
}

int64_t current_stream() {
  if (!cuda_) return -1;
  const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  return impl->getStream(impl->getDevice()).id();
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Entry entry{fn.name(), current_stream(), depth_++, false, {}};
  freeze_all(fn.inputs(), entry.tensors);
  log_.push_back(std::move(entry));
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  Entry entry{fn.name(), -1, --depth_, true, {}};
  const std::vector<c10::IValue>& outputs = fn.outputs();
  freeze_all(c10::ArrayRef<const c10::IValue>(outputs.data(), outputs.size()), entry.tensors);
  log_.push_back(std::move(entry));
}

void start() {
  TORCH_CHECK(handle_ == 0, "the observer is already on");
  // A CUDA build on a machine without a GPU has the guard but no device: no stream to ask for.
  cuda_ = c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA) &&
          c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->deviceCount() > 0;
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end)
                                           .needsInputs(true)
                                           .needsOutputs(true)
                                           .scopes({at::RecordScope::FUNCTION}));
}

// Stops observing; returns {ops seen, of them called from no other op, tensors frozen} and empties the log.
std::vector<int64_t> stop() {
  TORCH_CHECK(handle_ != 0, "the observer is not on");
  at::removeCallback(handle_);
  handle_ = 0;
  int64_t ops = 0, outermost = 0, tensors = 0;
  for (const Entry& entry : log_) {
    tensors += static_cast<int64_t>(entry.tensors.size());
    if (!entry.end) {
      ++ops;
      outermost += entry.depth == 0;
    }
  }
  log_.clear();
  return {ops, outermost, tensors};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("start", &start, "Start freezing every op's tensors on this thread.");
  m.def("stop", &stop, "Stop; (ops, outermost ops, tensors frozen) since start.");
}
