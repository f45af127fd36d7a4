#include "json_line.h"

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace memvirt::trace {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    JsonValue v;
    if (absl::Status st = Value(v, 0); !st.ok()) return st;
    SkipSpace();
    if (i_ != s_.size()) return Error("unexpected trailing characters");
    return v;
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("JSON: ", std::string(what), " at offset ", i_));
  }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n'))
      ++i_;
  }
  bool Literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  absl::Status Value(JsonValue& v, int depth) {
    if (depth > kMaxDepth) return Error("nesting too deep");
    SkipSpace();
    if (i_ >= s_.size()) return Error("unexpected end of input");
    char c = s_[i_];
    if (c == '{') return Object(v, depth);
    if (c == '[') return Array(v, depth);
    if (c == '"') {
      v.type = JsonValue::Type::kString;
      return String(v.string);
    }
    if (Literal("true")) {
      v.type = JsonValue::Type::kBool;
      v.boolean = true;
      return absl::OkStatus();
    }
    if (Literal("false")) {
      v.type = JsonValue::Type::kBool;
      return absl::OkStatus();
    }
    if (Literal("null")) {
      v.type = JsonValue::Type::kNull;
      return absl::OkStatus();
    }
    if (c == '-' || (c >= '0' && c <= '9')) return Number(v);
    return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::Status Number(JsonValue& v) {
    const size_t start = i_;
    if (s_[i_] == '-') ++i_;
    auto digits = [&] {
      size_t n = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_, ++n;
      return n;
    };
    const size_t int_start = i_;
    if (digits() == 0) return Error("malformed number");
    if (s_[int_start] == '0' && i_ - int_start > 1) return Error("leading zero in number");
    bool integral = true;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      integral = false;
      if (digits() == 0) return Error("malformed number");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      integral = false;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (digits() == 0) return Error("malformed number");
    }
    std::string lit(s_.substr(start, i_ - start));
    v.type = JsonValue::Type::kNumber;
    v.number = std::strtod(lit.c_str(), nullptr);
    if (integral && lit[0] != '-') {
      errno = 0;
      unsigned long long u = std::strtoull(lit.c_str(), nullptr, 10);
      if (errno == 0) v.integer = u;
    }
    return absl::OkStatus();
  }

  absl::Status String(std::string& out) {
    ++i_;  // opening quote
    while (true) {
      if (i_ >= s_.size()) return Error("unterminated string");
      char c = s_[i_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (i_ >= s_.size()) return Error("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          if (i_ + 4 > s_.size()) return Error("short \\u escape");
          unsigned cp = 0;
          for (int k = 0; k < 4; ++k) {
            char h = s_[i_++];
            cp <<= 4;
            if (h >= '0' && h <= '9')
              cp |= h - '0';
            else if (h >= 'a' && h <= 'f')
              cp |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F')
              cp |= h - 'A' + 10;
            else
              return Error("bad \\u escape");
          }
          // UTF-8 encode (surrogate pairs are kept as two code units).
          if (cp < 0x80) {
            out.push_back(static_cast<char>(cp));
          } else if (cp < 0x800) {
            out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          } else {
            out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
            out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          }
          break;
        }
        default:
          return Error("bad escape");
      }
    }
  }

  absl::Status Array(JsonValue& v, int depth) {
    v.type = JsonValue::Type::kArray;
    ++i_;
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return absl::OkStatus();
    }
    while (true) {
      JsonValue e;
      if (absl::Status st = Value(e, depth + 1); !st.ok()) return st;
      v.array.push_back(std::move(e));
      SkipSpace();
      if (i_ >= s_.size()) return Error("unterminated array");
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == ']') {
        ++i_;
        return absl::OkStatus();
      }
      return Error("expected ',' or ']'");
    }
  }

  absl::Status Object(JsonValue& v, int depth) {
    v.type = JsonValue::Type::kObject;
    ++i_;
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return absl::OkStatus();
    }
    while (true) {
      SkipSpace();
      if (i_ >= s_.size() || s_[i_] != '"') return Error("expected member name");
      std::string key;
      if (absl::Status st = String(key); !st.ok()) return st;
      SkipSpace();
      if (i_ >= s_.size() || s_[i_] != ':') return Error("expected ':'");
      ++i_;
      JsonValue e;
      if (absl::Status st = Value(e, depth + 1); !st.ok()) return st;
      if (!v.object.emplace(std::move(key), std::move(e)).second)
        return Error("duplicate member name");
      SkipSpace();
      if (i_ >= s_.size()) return Error("unterminated object");
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == '}') {
        ++i_;
        return absl::OkStatus();
      }
      return Error("expected ',' or '}'");
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

absl::StatusOr<JsonValue> ParseJson(std::string_view text) { return Parser(text).ParseDocument(); }

}  // namespace memvirt::trace
