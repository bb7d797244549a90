#include "data/text/corpus.h"

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "core/error.h"
#include "data/file_bytes.h"

namespace fs = std::filesystem;

namespace precis::data {

namespace {

template <typename Fn>
void for_each_line(const std::vector<uint8_t>& bytes, Fn&& fn) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  size_t pos = 0, line_no = 1;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    fn(line, line_no++);
    pos = nl + 1;
  }
}

std::string_view trim(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

void append_lines(const std::string& file, std::vector<std::string>& out) {
  for_each_line(read_file_bytes(file, kMaxTextFileBytes, "text file"), [&](std::string_view line, size_t) {
    if (!trim(line).empty()) out.emplace_back(line);
  });
}

}  // namespace

std::vector<std::string> read_text_lines(const std::string& path) {
  std::error_code ec;
  PRECIS_CHECK_T(IOError, fs::exists(path, ec), "read_text_lines: no such file or folder: ", path);
  std::vector<std::string> lines;
  if (!fs::is_directory(path, ec)) {
    append_lines(path, lines);
    return lines;
  }
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    PRECIS_CHECK_T(IOError, !ec, "read_text_lines: listing ", path, " failed: ", ec.message());
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(it->path().string());
  }
  PRECIS_CHECK_T(IOError, !files.empty(), "read_text_lines: the folder ", path, " holds no files");
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) append_lines(f, lines);
  return lines;
}

std::vector<std::string> read_wordnet_glosses(const std::string& dir) {
  std::vector<std::string> glosses;
  int found = 0;
  for (const char* part : {"noun", "verb", "adj", "adv"}) {
    const std::string file = dir + "/data." + part;
    if (!fs::exists(file)) continue;
    ++found;
    for_each_line(read_file_bytes(file, kMaxTextFileBytes, "text file"), [&](std::string_view line, size_t line_no) {
      if (line.empty() || line.substr(0, 2) == "  ") return;  // licence header
      const size_t bar = line.find('|');
      PRECIS_CHECK_T(IOError, bar != std::string_view::npos, "read_wordnet_glosses: ", file, ": line ", line_no,
                     " is a synset without a gloss (no '|'): not a WordNet data file?");
      const std::string_view gloss = trim(line.substr(bar + 1));
      if (!gloss.empty()) glosses.emplace_back(gloss);
    });
  }
  PRECIS_CHECK_T(IOError, found > 0, "read_wordnet_glosses: no data.{noun,verb,adj,adv} in ", dir,
                 " (install the Debian package wordnet-base: scripts/install-deps.sh --data)");
  return glosses;
}

std::vector<std::string> read_corpus(const std::string& path) {
  if (fs::is_directory(path) && fs::exists(path + "/data.noun")) return read_wordnet_glosses(path);
  return read_text_lines(path);
}

}  // namespace precis::data
