// Out-of-line definitions of tpullm/support/mapped_file.hpp (compiled once into tpullm_core).
#include "tpullm/support/mapped_file.hpp"

namespace tpullm::detail {

int register_mapping(const std::byte* data, std::size_t size, const std::string& path) {
  for (int i = 0; i < kMappingSlots; ++i) {
    int expected = 0;
    MappingSlot& s = g_mapping_slots[i];
    if (!s.state.compare_exchange_strong(expected, 1, std::memory_order_acquire))
      continue;
    s.begin = reinterpret_cast<std::uintptr_t>(data);
    s.end = s.begin + size;
    const std::size_t n = std::min(path.size(), sizeof s.path - 1);
    std::memcpy(s.path, path.data(), n);
    s.path[n] = '\0';
    s.state.store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void write_stderr(const char* s) noexcept {
  std::size_t n = 0;
  while (s[n] != '\0')
    ++n;
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0)
      return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

void on_mapping_fault(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<std::uintptr_t>(info ? info->si_addr : nullptr);
  for (auto& s : g_mapping_slots) {
    if (s.state.load(std::memory_order_acquire) != 2 || addr < s.begin || addr >= s.end)
      continue;
    write_stderr(g_fault_program);
    write_stderr(": I/O error: ");
    write_stderr(s.path);
    write_stderr(": the file was truncated or changed while in use (SIGBUS on its memory "
                 "mapping); rerun, or rerun with --no-mmap to read the file into memory first "
                 "(every tpullm command that maps a file takes it)\n");
    temp_registry::detail::remove_all(); // no temporary output survives the exit
    ::_exit(2);
  }
  // Not one of our mappings: a genuine bug. Restore the default action and re-raise.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

} // namespace tpullm::detail

namespace tpullm {

void install_mapped_file_fault_handler(const char* program) {
  const std::size_t n = std::min(std::strlen(program), sizeof detail::g_fault_program - 1);
  std::memcpy(detail::g_fault_program, program, n);
  detail::g_fault_program[n] = '\0';
  struct sigaction sa {};
  sa.sa_sigaction = &detail::on_mapping_fault;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

MappedFile::MappedFile(map_tag, const std::filesystem::path& path, FileAccess access)
    : path_(path), access_(access) {
  const std::string where = path.string();
  struct stat st {};
  UniqueFd fd = open_regular_file(path, &st);
  identity_ = file_identity(st);
  if (st.st_size <= 0)
    throw_error(ErrorKind::invalid_input, where, "file is empty");
  const auto size = static_cast<std::size_t>(st.st_size);
  if (access == FileAccess::map) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      throw_error(ErrorKind::io, where, "cannot mmap ", size, " bytes: ", std::strerror(e));
    }
    data_ = static_cast<const std::byte*>(p);
    size_ = size;
    slot_ = detail::register_mapping(data_, size_, where);
    return;
  }
  // FileAccess::read: private anonymous pages (page-aligned, like a mapping), filled by read().
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    throw_error(ErrorKind::io, where, "cannot allocate ", size,
                " bytes to read the file: ", std::strerror(e));
  }
  data_ = static_cast<const std::byte*>(p);
  size_ = size;
  auto* dst = static_cast<char*>(p);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd.get(), dst + done, size - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : 0;
      unmap();
      if (e != 0)
        throw_error(ErrorKind::io, where, "read failed: ", std::strerror(e));
      throw_error(ErrorKind::io, where, "file shrank while being read (", done, " of ", size,
                  " bytes)");
    }
    done += static_cast<std::size_t>(n);
  }
  ::mprotect(p, size, PROT_READ);
}

auto MappedFile::unmap() noexcept -> void {
  detail::unregister_mapping(slot_);
  slot_ = -1;
  if (data_ != nullptr)
    ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

} // namespace tpullm
