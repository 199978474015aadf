// SHA-256 (OpenSSL's EVP) and lower-case hex, for run ids, code and
// artifact digests and pool keys.
#pragma once

#include <openssl/evp.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

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
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

std::string sha256_hex(std::string_view data);

}  // namespace nsbox
