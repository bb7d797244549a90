#pragma once
// Plain-text corpora: lines from a file or a folder of files, and WordNet's glosses (the default
// text corpus: the Debian package wordnet-base installs them under /usr/share/wordnet).
#include <cstdint>
#include <string>
#include <vector>

namespace precis::data {

/// Where the Debian package wordnet-base installs WordNet 3.0.
inline constexpr const char* kWordNetDir = "/usr/share/wordnet";

/// A text file is read whole into memory: one of more than 1 GiB (or a .gz that inflates to more)
/// is refused with IOError. Split larger corpora into several files under one folder.
inline constexpr uint64_t kMaxTextFileBytes = uint64_t{1} << 30;

/// The non-blank lines of a text file, or of every regular file under a folder (recursively, in
/// sorted path order; hidden files skipped). Line ends (\n, \r\n) are removed; .gz files are
/// decompressed. IOError when the path does not exist, or a folder has no files.
std::vector<std::string> read_text_lines(const std::string& path);

/// The glosses of WordNet's data.{noun,verb,adj,adv} in `dir`: the text after the "|" of each
/// synset line, trimmed (definition and examples). The licence header (lines starting with two
/// spaces) is skipped. IOError when none of the four files exists, or a synset line has no "|".
std::vector<std::string> read_wordnet_glosses(const std::string& dir = kWordNetDir);

/// A corpus from `path`: WordNet glosses when it is a folder holding data.noun, else
/// read_text_lines(path).
std::vector<std::string> read_corpus(const std::string& path);

}  // namespace precis::data
