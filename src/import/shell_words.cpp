// Shell-like word reader (shell_words.hpp).
#include "import/shell_words.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string_view>

namespace meshplan {

namespace {


// Raw words of one statement, quotes still in place; "(" and ")" of NAME=( ... ) are words.
using Statement = std::vector<std::string>;

std::vector<Statement> lex(const std::string& text) {
  std::vector<Statement> out;
  Statement cur;
  std::string word;
  bool in_word = false;
  int depth = 0;  // inside NAME=( ... ): newlines separate elements, not statements
  auto end_word = [&] {
    if (in_word) cur.push_back(word);
    word.clear();
    in_word = false;
  };
  auto end_statement = [&] {
    end_word();
    if (!cur.empty()) out.push_back(cur);
    cur.clear();
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      if (text[i + 1] == '\n') {  // continuation
        ++i;
        continue;
      }
      if (text[i + 1] == '\r' && i + 2 < text.size() && text[i + 2] == '\n') {
        i += 2;
        continue;
      }
      word += c;
      word += text[++i];
      in_word = true;
      continue;
    }
    if (c == '\'' || c == '"') {
      const std::size_t close = [&] {
        for (std::size_t j = i + 1; j < text.size(); ++j) {
          if (c == '"' && text[j] == '\\') ++j;
          else if (text[j] == c) return j;
        }
        return text.size();
      }();
      word += text.substr(i, std::min(close, text.size() - 1) - i + 1);
      if (close == text.size()) word += c;  // unterminated: closed at the end of the file
      i = std::min(close, text.size());
      in_word = true;
      continue;
    }
    if (c == '#' && !in_word) {
      while (i < text.size() && text[i] != '\n') ++i;
      if (depth == 0) end_statement();
      continue;
    }
    if (c == '\n' || c == ';') {
      if (depth == 0) end_statement();
      else end_word();
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      end_word();
      continue;
    }
    if (c == '(' && in_word && !word.empty() && word.back() == '=') {
      end_word();
      cur.push_back("(");
      ++depth;
      continue;
    }
    if (c == ')' && depth > 0) {
      end_word();
      cur.push_back(")");
      --depth;
      continue;
    }
    word += c;
    in_word = true;
  }
  end_statement();
  return out;
}

bool is_name_char(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (!first && std::isdigit(static_cast<unsigned char>(c)));
}

// NAME=... -> NAME; "" when the word is not an assignment.
std::string assigned_name(const std::string& raw) {
  const auto eq = raw.find('=');
  if (eq == std::string::npos || eq == 0) return "";
  for (std::size_t i = 0; i < eq; ++i)
    if (!is_name_char(raw[i], i == 0)) return "";
  return raw.substr(0, eq);
}

using Vars = std::map<std::string, std::vector<std::string>>;  // arrays; a scalar is one element

// Expands quotes and $NAME / ${NAME} / ${NAME:-default} / ${NAME[@]} in one raw word. An unquoted
// word that is exactly one variable is split into words (bash word splitting); otherwise one word.
std::vector<ShellWord> expand(const std::string& raw, const Vars& vars);

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + v[i];
  return s;
}

// Words of a variable's value; nullopt when unset.
std::optional<std::vector<std::string>> lookup(const Vars& vars, const std::string& name) {
  auto it = vars.find(name);
  if (it == vars.end()) return std::nullopt;
  return it->second;
}

struct Ref {
  std::string name, fallback;
  bool has_fallback = false;
  std::size_t end = 0;  // index after the reference
  bool ok = false;
};

Ref parse_ref(const std::string& s, std::size_t dollar) {
  Ref r;
  std::size_t i = dollar + 1;
  if (i < s.size() && s[i] == '{') {
    const auto close = s.find('}', i);
    if (close == std::string::npos) return r;
    std::string inner = s.substr(i + 1, close - i - 1);
    r.end = close + 1;
    if (const auto d = inner.find(":-"); d != std::string::npos) {
      r.fallback = inner.substr(d + 2);
      r.has_fallback = true;
      inner = inner.substr(0, d);
    } else if (const auto e = inner.find(":="); e != std::string::npos) {
      r.fallback = inner.substr(e + 2);
      r.has_fallback = true;
      inner = inner.substr(0, e);
    }
    if (inner.size() > 3 && (inner.ends_with("[@]") || inner.ends_with("[*]"))) inner.resize(inner.size() - 3);
    r.name = inner;
    r.ok = !inner.empty() && std::all_of(inner.begin(), inner.end(), [&](char c) { return is_name_char(c, false); });
    return r;
  }
  std::size_t j = i;
  while (j < s.size() && is_name_char(s[j], j == i)) ++j;
  r.name = s.substr(i, j - i);
  r.end = j;
  r.ok = !r.name.empty();
  return r;
}

std::vector<ShellWord> expand(const std::string& raw, const Vars& vars) {
  // The script's own arguments ("$@", $*): none when the file is read rather than run, and a
  // quoted "$@" of no arguments is no word at all (launch scripts end with it to pass overrides).
  if (raw == "\"$@\"" || raw == "$@" || raw == "\"$*\"" || raw == "$*" || raw == "\"${@}\"" || raw == "${@}") return {};
  // Whole-word unquoted variable: word splitting.
  if (!raw.empty() && raw[0] == '$') {
    const Ref r = parse_ref(raw, 0);
    if (r.ok && r.end == raw.size()) {
      std::optional<std::vector<std::string>> v = lookup(vars, r.name);
      if (!v && r.has_fallback) v = std::vector<std::string>{r.fallback};
      if (!v) return {ShellWord{raw, {r.name}}};
      std::vector<ShellWord> out;
      for (const auto& e : *v) {
        std::size_t i = 0;
        while (i < e.size()) {
          while (i < e.size() && std::isspace(static_cast<unsigned char>(e[i]))) ++i;
          std::size_t j = i;
          while (j < e.size() && !std::isspace(static_cast<unsigned char>(e[j]))) ++j;
          if (j > i) out.push_back({e.substr(i, j - i), {}});
          i = j;
        }
      }
      return out;
    }
  }
  ShellWord w;
  char quote = 0;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (quote == '\'') {
      if (c == '\'') quote = 0;
      else w.text += c;
      continue;
    }
    if (c == '\'' && quote == 0) { quote = '\''; continue; }
    if (c == '"') { quote = quote == '"' ? 0 : '"'; continue; }
    if (c == '\\' && i + 1 < raw.size()) { w.text += raw[++i]; continue; }
    if (c == '$' && i + 1 < raw.size()) {
      if (raw[i + 1] == '(') {  // command substitution / arithmetic: not evaluated
        int d = 0;
        std::size_t j = i + 1;
        for (; j < raw.size(); ++j) {
          if (raw[j] == '(') ++d;
          else if (raw[j] == ')' && --d == 0) break;
        }
        const std::string sub = raw.substr(i, std::min(j, raw.size() - 1) - i + 1);
        w.unresolved.push_back(sub);
        w.text += sub;
        i = std::min(j, raw.size() - 1);
        continue;
      }
      if (raw[i + 1] == '@' || raw[i + 1] == '*') {  // the script's arguments: none
        ++i;
        continue;
      }
      const Ref r = parse_ref(raw, i);
      if (r.ok) {
        std::optional<std::vector<std::string>> v = lookup(vars, r.name);
        if (v) w.text += joined(*v);
        else if (r.has_fallback) w.text += r.fallback;
        else {
          w.unresolved.push_back(r.name);
          w.text += raw.substr(i, r.end - i);
        }
        i = r.end - 1;
        continue;
      }
    }
    w.text += c;
  }
  return {w};
}

}  // namespace

std::vector<std::vector<ShellWord>> shell_commands(const std::string& text) { return shell_commands(text, nullptr); }

std::vector<std::vector<ShellWord>> shell_commands(const std::string& text, std::map<std::string, std::string>* variables) {
  Vars vars;
  std::vector<std::vector<ShellWord>> commands;
  bool after_command = false;
  for (const Statement& st : lex(text)) {
    std::size_t i = 0;
    if (st[0] == "export" || st[0] == "declare" || st[0] == "local" || st[0] == "readonly") ++i;
    // Leading assignments (NAME=value, NAME=( ... )); the rest, if any, is a command.
    while (i < st.size()) {
      const std::string name = assigned_name(st[i]);
      if (name.empty()) break;
      if (st[i].size() == name.size() + 1 && i + 1 < st.size() && st[i + 1] == "(") {
        std::vector<std::string> elems;
        std::size_t j = i + 2;
        for (; j < st.size() && st[j] != ")"; ++j)
          for (const ShellWord& w : expand(st[j], vars)) elems.push_back(w.text);
        vars[name] = elems;
        i = j + 1;
        continue;
      }
      const std::string value = st[i].substr(name.size() + 1);
      // No word splitting in an assignment: NAME=$OTHER keeps OTHER's spaces.
      std::string joined_value;
      bool resolved = true;
      for (const ShellWord& w : value.empty() ? std::vector<ShellWord>{} : expand(value, vars)) {
        joined_value += (joined_value.empty() ? "" : " ") + w.text;
        resolved = resolved && w.unresolved.empty();
      }
      if (resolved) vars[name] = {joined_value};
      else vars.erase(name);  // depends on something unknown: unset
      ++i;
    }
    if (i >= st.size()) {
      after_command = false;
      continue;
    }
    // A line that starts with a flag continues the command before it: an arguments file with one
    // flag per line (meshplan's megatron_args.txt) is one command. No shell command starts with --.
    const bool continues = after_command && i == 0 && st[0].starts_with("--");
    if (!continues) commands.emplace_back();
    for (; i < st.size(); ++i)
      for (ShellWord& w : expand(st[i], vars)) commands.back().push_back(std::move(w));
    after_command = true;
  }
  if (variables != nullptr)
    for (const auto& [name, v] : vars) (*variables)[name] = joined(v);
  return commands;
}

}  // namespace meshplan
