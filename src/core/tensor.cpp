#include "core/tensor.h"

#include "core/error.h"
#include "core/memory.h"
#include "core/system_memory.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

namespace ndt {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    NDT_CHECK(!__builtin_mul_overflow(n, d, &n), "tensor shape {} has more elements than a 64-bit count holds",
              shape_str(shape));
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

static constexpr size_t kAlignment = 64;

namespace {

// Keeps freed large blocks for reuse by a later allocation, as PyTorch's caching
// allocator does. Training allocates the same transient buffers every step (gathered
// parameters, gradient buffers, communication staging); glibc hands blocks above 32 MiB
// back to the kernel at once, so each step would pay page faults and kernel zeroing for
// them again. A request takes the smallest cached block of its size up to 5/4 of it:
// buffers whose size follows the data (an MoE block's routed rows) then reuse blocks
// from earlier steps instead of piling up new sizes. The ledger counts live tensors
// only (their requested bytes); cached blocks are reported by storage_cached_bytes().
class BlockCache {
 public:
  static constexpr size_t kMinBytes = size_t{1} << 20;   // smaller blocks: plain malloc/free
  static constexpr size_t kMaxCached = size_t{4} << 30;  // beyond this, blocks are freed

  // A block of at least `bytes`; *block_bytes: its size (to give back).
  void* take(size_t bytes, size_t* block_bytes) {
    *block_bytes = bytes;
    if (bytes >= kMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.lower_bound(bytes);
      if (it != free_.end() && it->first <= bytes + bytes / 4) {
        void* block = it->second;
        *block_bytes = it->first;
        free_.erase(it);
        cached_ -= *block_bytes;
        return block;
      }
    }
    return std::aligned_alloc(kAlignment, bytes);
  }

  void give(void* block, size_t bytes) {
    if (bytes >= kMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + bytes <= kMaxCached) {
        free_.emplace(bytes, block);
        cached_ += bytes;
        return;
      }
    }
    std::free(block);
  }

  size_t cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
  }

 private:
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
};

BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache();  // never destroyed: storages may outlive statics
  return *cache;
}

size_t rounded_bytes(size_t bytes) {
  return bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

size_t storage_cached_bytes() { return block_cache().cached(); }

Storage::Storage(size_t bytes, MemTag tag, Device device) : bytes_(bytes), tag_(tag), device_(device) {
  if (device != Device::cpu) {
    block_bytes_ = rounded_bytes(bytes);
    data_ = device_memory(device).allocate(block_bytes_);
    MemoryLedger::for_device(device).on_alloc(tag_, bytes_);
    return;
  }
  data_ = block_cache().take(rounded_bytes(bytes), &block_bytes_);
  // The last line of defence (runs check what they need before allocating): the bytes
  // and what they were for, never a bare std::bad_alloc.
  NDT_CHECK(data_ != nullptr, "cannot allocate {} ({} bytes) of {} memory: the system refused it (this machine has "
            "{} in all)", bytes_text(static_cast<double>(bytes)), bytes, mem_tag_name(tag),
            bytes_text(physical_memory_bytes()));
  MemoryLedger::instance().on_alloc(tag_, bytes_);
}

Storage::~Storage() {
  if (device_ == Device::cpu) {
    block_cache().give(data_, block_bytes_);
  } else {
    device_memory(device_).release(data_, block_bytes_);
  }
  MemoryLedger::for_device(device_).on_free(tag_, bytes_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemTag tag, Device device) {
  for (int64_t d : shape) NDT_CHECK(d >= 0, "tensor shape {} has a negative size", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), tag, device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemTag tag, Device device) {
  Tensor t = empty(shape, dtype, tag, device);
  t.zero_();
  return t;
}

Tensor Tensor::view(const Shape& shape) const {
  NDT_CHECK(shape_numel(shape) == numel(), "cannot view tensor of shape {} as {}", shape_str(shape_),
            shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  NDT_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
            "slice [{}, {}) out of range for shape {}", begin, end, shape_str(shape_));
  Tensor t = *this;
  int64_t row = numel() / (shape_[0] == 0 ? 1 : shape_[0]);
  t.offset_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

void Tensor::zero_() {
  if (device() == Device::cpu) {
    std::memset(raw(), 0, nbytes());
  } else {
    device_memory(device()).zero(raw(), nbytes());
  }
}

void Tensor::copy_from(const Tensor& other) {
  NDT_CHECK(defined() && other.defined(), "Tensor::copy_from: {} tensor is undefined",
            defined() ? "source" : "destination");
  NDT_CHECK(shape_ == other.shape_ && dtype_ == other.dtype_,
            "Tensor::copy_from: source {} {} ({} elements) does not match destination {} {} ({} elements); "
            "shape and dtype must be equal",
            shape_str(other.shape_), dtype_name(other.dtype_), other.numel(), shape_str(shape_),
            dtype_name(dtype_), numel());
  if (nbytes() == 0 || (raw() == other.raw() && device() == other.device())) return;
  // Core owns the device layer (kernels build on core, not the reverse): host to host is
  // a memcpy; any pair with a device goes through that device's memory (two different
  // devices would need a peer copy, which no backend offers).
  if (device() == Device::cpu && other.device() == Device::cpu) {
    std::memcpy(raw(), other.raw(), nbytes());
    return;
  }
  NDT_CHECK(device() == Device::cpu || other.device() == Device::cpu || device() == other.device(),
            "Tensor::copy_from: no copy from {} to {}", device_name(other.device()), device_name(device()));
  const Device gpu = device() == Device::cpu ? other.device() : device();
  device_memory(gpu).copy(raw(), device(), other.raw(), other.device(), nbytes());
}

}  // namespace ndt
