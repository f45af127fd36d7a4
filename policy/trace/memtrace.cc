#include "memvirt/trace/memtrace.h"

#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "json_line.h"

namespace memvirt::trace {
namespace {

using Type = JsonValue::Type;

absl::Status LineError(size_t line, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", std::string(what)));
}

const JsonValue* Member(const JsonValue& obj, const std::string& key) {
  auto it = obj.object.find(key);
  return it == obj.object.end() ? nullptr : &it->second;
}

absl::StatusOr<uint64_t> GetUint(const JsonValue& obj, const std::string& key, size_t line) {
  const JsonValue* v = Member(obj, key);
  if (v == nullptr) return LineError(line, absl::StrCat("missing \"", key, "\""));
  if (v->type != Type::kNumber || !v->integer.has_value())
    return LineError(line, absl::StrCat("\"", key, "\" must be a non-negative integer"));
  return *v->integer;
}

absl::StatusOr<std::vector<uint64_t>> GetIdList(const JsonValue& obj, const std::string& key,
                                                size_t line) {
  std::vector<uint64_t> out;
  const JsonValue* v = Member(obj, key);
  if (v == nullptr) return out;
  if (v->type != Type::kArray)
    return LineError(line, absl::StrCat("\"", key, "\" must be an array"));
  for (const JsonValue& e : v->array) {
    if (e.type != Type::kNumber || !e.integer.has_value())
      return LineError(line, absl::StrCat("\"", key, "\" must hold non-negative integer ids"));
    out.push_back(*e.integer);
  }
  return out;
}

}  // namespace

absl::StatusOr<Trace> ParseTrace(std::string_view text) {
  Trace trace;
  std::unordered_map<uint64_t, size_t> tensor_line;
  std::unordered_set<uint64_t> kernel_ids;
  std::vector<std::pair<size_t, uint64_t>> tensor_refs;  // (line, tensor id)
  std::vector<std::pair<size_t, uint64_t>> kernel_refs;  // (line, kernel id)
  bool have_header = false;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    absl::StatusOr<JsonValue> parsed = ParseJson(line);
    if (!parsed.ok()) return LineError(line_no, std::string(parsed.status().message()));
    const JsonValue& obj = *parsed;
    if (obj.type != Type::kObject) return LineError(line_no, "expected a JSON object");
    if (!have_header) {
      const JsonValue* format = Member(obj, "format");
      if (format == nullptr || format->type != Type::kString || format->string != "memtrace-v1")
        return LineError(line_no, "first line must be a header with \"format\":\"memtrace-v1\"");
      if (const JsonValue* m = Member(obj, "model"); m && m->type == Type::kString)
        trace.model = m->string;
      if (const JsonValue* s = Member(obj, "source"); s && s->type == Type::kString)
        trace.source = s->string;
      if (const JsonValue* b = Member(obj, "batch"); b && b->type == Type::kNumber) {
        // -2^63 <= number < 2^63: the conversion to int64_t is defined (NaN fails both).
        if (!(b->number >= -0x1p63 && b->number < 0x1p63))
          return LineError(line_no, "\"batch\" is out of range");
        trace.batch = static_cast<int64_t>(b->number);
      }
      if (Member(obj, "iterations") != nullptr) {
        absl::StatusOr<uint64_t> it = GetUint(obj, "iterations", line_no);
        if (!it.ok()) return it.status();
        if (*it == 0 || *it > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          return LineError(line_no, "\"iterations\" must be in [1, 2^63)");
        trace.iterations = static_cast<int64_t>(*it);
      }
      have_header = true;
      continue;
    }
    const JsonValue* t = Member(obj, "t");
    if (t == nullptr || t->type != Type::kString)
      return LineError(line_no, "missing record type \"t\"");
    if (t->string == "tensor") {
      TraceTensor tensor;
      absl::StatusOr<uint64_t> id = GetUint(obj, "id", line_no);
      if (!id.ok()) return id.status();
      absl::StatusOr<uint64_t> bytes = GetUint(obj, "bytes", line_no);
      if (!bytes.ok()) return bytes.status();
      if (*bytes == 0) return LineError(line_no, "tensor \"bytes\" must be > 0");
      tensor.id = *id;
      tensor.bytes = *bytes;
      if (const JsonValue* k = Member(obj, "kind"); k != nullptr) {
        if (k->type != Type::kString) return LineError(line_no, "\"kind\" must be a string");
        tensor.kind = k->string;
      }
      if (const JsonValue* p = Member(obj, "persistent"); p != nullptr) {
        if (p->type != Type::kBool) return LineError(line_no, "\"persistent\" must be a boolean");
        tensor.persistent = p->boolean;
      }
      if (!tensor_line.emplace(tensor.id, line_no).second)
        return LineError(line_no, absl::StrCat("duplicate tensor id ", tensor.id));
      trace.tensors.push_back(std::move(tensor));
    } else if (t->string == "kernel") {
      TraceKernel k;
      absl::StatusOr<uint64_t> id = GetUint(obj, "id", line_no);
      if (!id.ok()) return id.status();
      k.id = *id;
      if (!kernel_ids.insert(k.id).second)
        return LineError(line_no, absl::StrCat("duplicate kernel id ", k.id));
      if (const JsonValue* n = Member(obj, "name"); n != nullptr && n->type == Type::kString)
        k.name = n->string;
      const JsonValue* us = Member(obj, "us");
      if (us == nullptr || us->type != Type::kNumber || !(us->number >= 0) ||
          !std::isfinite(us->number))
        return LineError(line_no, "kernel needs a finite \"us\" >= 0");
      k.us = us->number;
      absl::StatusOr<std::vector<uint64_t>> reads = GetIdList(obj, "reads", line_no);
      if (!reads.ok()) return reads.status();
      absl::StatusOr<std::vector<uint64_t>> writes = GetIdList(obj, "writes", line_no);
      if (!writes.ok()) return writes.status();
      k.reads = std::move(*reads);
      k.writes = std::move(*writes);
      for (uint64_t r : k.reads) tensor_refs.push_back({line_no, r});
      for (uint64_t w : k.writes) tensor_refs.push_back({line_no, w});
      trace.kernels.push_back(std::move(k));
    } else if (t->string == "free") {
      TraceFree f;
      absl::StatusOr<uint64_t> tensor = GetUint(obj, "tensor", line_no);
      if (!tensor.ok()) return tensor.status();
      absl::StatusOr<uint64_t> after = GetUint(obj, "after_kernel", line_no);
      if (!after.ok()) return after.status();
      f.tensor = *tensor;
      f.after_kernel = *after;
      tensor_refs.push_back({line_no, f.tensor});
      kernel_refs.push_back({line_no, f.after_kernel});
      trace.frees.push_back(f);
    } else {
      return LineError(line_no, absl::StrCat("unknown record type \"", t->string, "\""));
    }
  }
  if (!have_header) return LineError(line_no == 0 ? 1 : line_no, "empty trace (no header)");
  for (const auto& [line, id] : tensor_refs) {
    if (!tensor_line.contains(id)) return LineError(line, absl::StrCat("unknown tensor id ", id));
  }
  for (const auto& [line, id] : kernel_refs) {
    if (!kernel_ids.contains(id)) return LineError(line, absl::StrCat("unknown kernel id ", id));
  }
  return trace;
}

absl::StatusOr<Trace> ReadTrace(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files transparently
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot open trace ", path));
  std::string text;
  char buf[1 << 16];
  while (true) {
    int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      return absl::DataLossError(absl::StrCat(path, ": ", msg));
    }
    if (n == 0) break;
    text.append(buf, n);
  }
  // A gzip stream cut short reads as a shorter file: gzerror() tells.
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  if (err != Z_OK && err != Z_STREAM_END) {
    // zlib's message already names the file.
    std::string what = msg != nullptr ? msg : path + ": read error";
    gzclose(f);
    return absl::DataLossError(what);
  }
  gzclose(f);
  absl::StatusOr<Trace> trace = ParseTrace(text);
  if (!trace.ok()) {
    return absl::Status(trace.status().code(),
                        absl::StrCat(path, ": ", std::string(trace.status().message())));
  }
  return trace;
}

namespace {

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::string IdList(const std::vector<uint64_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) absl::StrAppend(&out, i ? "," : "", ids[i]);
  out.push_back(']');
  return out;
}

}  // namespace

std::string FormatTrace(const Trace& trace) {
  std::string out;
  absl::StrAppend(&out, "{\"format\":\"memtrace-v1\",\"model\":", Quote(trace.model),
                  ",\"batch\":", trace.batch, ",\"source\":", Quote(trace.source),
                  ",\"iterations\":", trace.iterations, "}\n");
  for (const TraceTensor& t : trace.tensors) {
    absl::StrAppend(&out, "{\"t\":\"tensor\",\"id\":", t.id, ",\"bytes\":", t.bytes,
                    ",\"kind\":", Quote(t.kind),
                    ",\"persistent\":", t.persistent ? "true" : "false", "}\n");
  }
  // Frees are emitted right after the kernel they follow, as in the eval traces.
  std::unordered_map<uint64_t, std::vector<uint64_t>> frees_after;
  for (const TraceFree& f : trace.frees) frees_after[f.after_kernel].push_back(f.tensor);
  for (const TraceKernel& k : trace.kernels) {
    absl::StrAppend(&out, "{\"t\":\"kernel\",\"id\":", k.id, ",\"name\":", Quote(k.name),
                    ",\"us\":", absl::StrFormat("%.3f", k.us), ",\"reads\":", IdList(k.reads),
                    ",\"writes\":", IdList(k.writes), "}\n");
    auto it = frees_after.find(k.id);
    if (it == frees_after.end()) continue;
    for (uint64_t tensor : it->second) {
      absl::StrAppend(&out, "{\"t\":\"free\",\"tensor\":", tensor, ",\"after_kernel\":", k.id,
                      "}\n");
    }
  }
  return out;
}

absl::Status WriteTrace(const Trace& trace, const std::string& path) {
  const std::string text = FormatTrace(trace);
  const bool gz = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb6");
    if (f == nullptr) return absl::UnavailableError(absl::StrCat("cannot create ", path));
    size_t done = 0;
    while (done < text.size()) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(text.size() - done, 1 << 20));
      int n = gzwrite(f, text.data() + done, chunk);
      if (n <= 0) {
        gzclose(f);
        return absl::DataLossError(absl::StrCat("write failed: ", path));
      }
      done += n;
    }
    if (gzclose(f) != Z_OK) return absl::DataLossError(absl::StrCat("close failed: ", path));
    return absl::OkStatus();
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::UnavailableError(absl::StrCat("cannot create ", path));
  size_t n = std::fwrite(text.data(), 1, text.size(), f);
  if (std::fclose(f) != 0 || n != text.size())
    return absl::DataLossError(absl::StrCat("write failed: ", path));
  return absl::OkStatus();
}

}  // namespace memvirt::trace
