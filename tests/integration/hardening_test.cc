// The built programs are position-independent and fully RELRO: every symbol
// is bound at start-up and the GOT is read-only afterwards (docs/SECURITY.md).
#include <elf.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace nsbox::testing {
namespace {

struct ElfFacts {
  bool read = false;
  bool pie = false;
  bool relro_segment = false;
  bool bind_now = false;
};

template <typename T>
bool read_at(const std::vector<char>& file, uint64_t offset, T& out) {
  if (offset > file.size() || file.size() - offset < sizeof(T)) return false;
  std::copy_n(file.data() + offset, sizeof(T), reinterpret_cast<char*>(&out));
  return true;
}

ElfFacts inspect(const std::string& path) {
  ElfFacts facts;
  std::ifstream in(path, std::ios::binary);
  std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Elf64_Ehdr eh{};
  if (!read_at(file, 0, eh) || std::string(reinterpret_cast<char*>(eh.e_ident), 4) != ELFMAG ||
      eh.e_ident[EI_CLASS] != ELFCLASS64)
    return facts;
  facts.read = true;
  const bool shared_object = eh.e_type == ET_DYN;  // PIE executables and libraries; DF_1_PIE tells them apart
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    if (!read_at(file, eh.e_phoff + uint64_t{i} * eh.e_phentsize, ph)) return ElfFacts{};
    if (ph.p_type == PT_GNU_RELRO) facts.relro_segment = true;
    if (ph.p_type != PT_DYNAMIC) continue;
    for (uint64_t off = ph.p_offset; off + sizeof(Elf64_Dyn) <= ph.p_offset + ph.p_filesz; off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn dyn{};
      if (!read_at(file, off, dyn) || dyn.d_tag == DT_NULL) break;
      if (dyn.d_tag == DT_BIND_NOW || (dyn.d_tag == DT_FLAGS && (dyn.d_un.d_val & DF_BIND_NOW)) ||
          (dyn.d_tag == DT_FLAGS_1 && (dyn.d_un.d_val & DF_1_NOW)))
        facts.bind_now = true;
      if (dyn.d_tag == DT_FLAGS_1 && (dyn.d_un.d_val & DF_1_PIE) && shared_object) facts.pie = true;
    }
  }
  return facts;
}

std::string sibling(const std::string& path, const std::string& name) {
  return path.substr(0, path.rfind('/') + 1) + name;
}

TEST(Hardening, ProgramsArePieWithFullRelro) {
  for (const std::string& path : {std::string(NSBOX_BINARY), sibling(NSBOX_BINARY, "nsbox-serve")}) {
    SCOPED_TRACE(path);
    ElfFacts f = inspect(path);
    ASSERT_TRUE(f.read) << "not a readable ELF64 file";
    EXPECT_TRUE(f.pie);
    EXPECT_TRUE(f.relro_segment);
    EXPECT_TRUE(f.bind_now);
  }
}

}  // namespace
}  // namespace nsbox::testing
