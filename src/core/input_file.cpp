#include "core/input_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ndt {

std::string input_file_problem(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) return "does not exist";
  if (ec) return "cannot be read: " + ec.message();
  if (std::filesystem::is_directory(status)) return "is a directory, not a file";
  if (!std::filesystem::is_regular_file(status)) return "is not a regular file";
  // Permissions alone do not say it (root reads anything): try it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::string("cannot be read: ") + std::strerror(errno);
  ::close(fd);
  return "";
}

}  // namespace ndt
