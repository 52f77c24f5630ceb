#pragma once
// One error type for every bad input: the CLI prints what() as a single line
// "FILE: KEY: REASON" and exits non-zero.
#include <stdexcept>
#include <string>

namespace meshplan {

class InputError : public std::runtime_error {
public:
  InputError(std::string file, std::string key, std::string reason)
      : std::runtime_error(format(file, key, reason)), file_(std::move(file)),
        key_(std::move(key)), reason_(std::move(reason)) {}

  const std::string& file() const { return file_; }
  const std::string& key() const { return key_; }
  const std::string& reason() const { return reason_; }

private:
  static std::string format(const std::string& file, const std::string& key,
                            const std::string& reason) {
    // A command-line flag names itself ("--tokens: ..."); only a key with no file needs "<input>".
    const bool flag = file.empty() && key.size() > 1 && key[0] == '-';
    std::string s = flag ? key : (file.empty() ? std::string("<input>") : file);
    if (!key.empty() && !flag) s += ": " + key;
    s += ": " + reason;
    // One line whatever the input held: a key or reason quoting the file's own text (a YAML scalar
    // folded over lines, a stray control byte) must not break the message.
    for (char& c : s)
      if (static_cast<unsigned char>(c) < 0x20 || c == '\x7f') c = ' ';
    return s;
  }
  std::string file_, key_, reason_;
};

}  // namespace meshplan
