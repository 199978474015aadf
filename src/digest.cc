#include "nsbox/digest.h"

#include <openssl/evp.h>

#include <cerrno>
#include <type_traits>

#include "nsbox/error.h"

namespace nsbox {

std::string to_hex(const unsigned char* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 15];
  }
  return out;
}

static_assert(std::is_same_v<EVP_MD_CTX, evp_md_ctx_st>,
              "digest.h forward-declares OpenSSL's EVP_MD_CTX as struct evp_md_ctx_st (OpenSSL 1.1 and later)");

void Sha256::Free::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) throw SysError("sha256", "init", ENOMEM);
}

void Sha256::update(const char* data, size_t size) {
  if (EVP_DigestUpdate(ctx_.get(), data, size) != 1) throw SysError("sha256", "update", EINVAL);
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_.get(), digest, &len) != 1) throw SysError("sha256", "final", EINVAL);
  return to_hex(digest, len);
}

std::string sha256_hex(std::string_view data) {
  Sha256 hash;
  hash.update(data.data(), data.size());
  return hash.hex();
}

}  // namespace nsbox
