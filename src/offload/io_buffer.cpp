#include "offload/io_buffer.h"

#include "core/error.h"

#include <cstdlib>
#include <new>
#include <utility>

namespace ndt::offload {

IoBuffer::IoBuffer(size_t bytes, MemTag tag) : bytes_(bytes), tag_(tag) {
  NDT_CHECK(bytes % kAlignment == 0, "offload: an I/O buffer of {} bytes is not a multiple of {}", bytes, kAlignment);
  if (::posix_memalign(&data_, kAlignment, bytes == 0 ? kAlignment : bytes) != 0) throw std::bad_alloc();
  MemoryLedger::instance().on_alloc(tag_, bytes_);
}

IoBuffer::~IoBuffer() { release(); }

void IoBuffer::release() {
  if (!data_) return;
  std::free(data_);
  MemoryLedger::instance().on_free(tag_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

IoBuffer::IoBuffer(IoBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), tag_(other.tag_) {}

IoBuffer& IoBuffer::operator=(IoBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    tag_ = other.tag_;
  }
  return *this;
}

}  // namespace ndt::offload
