#pragma once
// Shell-like words of a launch script or an arguments file: `\` continuations, quotes, `#`
// comments, `NAME=value` / `NAME=( ... )` assignments and $NAME / ${NAME} / ${NAME:-default} /
// ${NAME[@]} expansion, as far as a script can be read without running it. The Megatron-LM
// importer picks its command out of these; a variable the file does not set stays unresolved.
#include <map>
#include <string>
#include <vector>

namespace meshplan {

// A word after expansion; `unresolved` names the variables it uses that the file does not set.
struct ShellWord {
  std::string text;
  std::vector<std::string> unresolved;
};

// The commands of `text`, each the expanded words of one statement (a line that starts with `--`
// continues the command before it: an arguments file with one flag per line is one command).
// Assignments are applied in order and are not words of any command.
std::vector<std::vector<ShellWord>> shell_commands(const std::string& text);
// The same, and the variables the file sets (resolved ones only; an array joined by spaces) as
// they are at its end.
std::vector<std::vector<ShellWord>> shell_commands(const std::string& text, std::map<std::string, std::string>* variables);

}  // namespace meshplan
