// SHA-256 (OpenSSL's EVP) and lower-case hex, for run ids, code and
// artifact digests and pool keys.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

// OpenSSL's EVP_MD_CTX, declared here so that includers need no OpenSSL headers.
struct evp_md_ctx_st;

namespace nsbox {

std::string to_hex(const unsigned char* data, size_t size);

// Incremental SHA-256. Throws SysError when OpenSSL cannot set it up.
class Sha256 {
 public:
  Sha256();
  void update(const char* data, size_t size);
  // The digest in hex; the object is spent afterwards.
  std::string hex();

 private:
  struct Free {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_md_ctx_st, Free> ctx_;
};

std::string sha256_hex(std::string_view data);

}  // namespace nsbox
