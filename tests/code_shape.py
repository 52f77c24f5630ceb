#!/usr/bin/env python3
"""The shape of src/ that issue 34 asks a maintainer to keep: function lengths and the files
that switch on the runtime.

Reports every function over 80 lines (marking those over 80 without a comment above them saying
why) and over 120 lines, and the files outside the runtime's own definition (the enum in
spec/plan.*, the registry in spec/runtimes.*, spec/runtime_traits.hpp) that test `runtime ==` or
name `Runtime::` values. Fails when more
functions are over 120 lines than MAX_OVER_120: the goal is none, so the ceiling only comes down
(lower it in the commit that splits one).

    tests/code_shape.py [SRC_DIR]      report and check (the test suite runs this)
    tests/code_shape.py --self-test    check the scanner on constructs src/ uses

A brace scanner, not a C++ parser: comments, string and character literals (raw strings and digit
separators included) and preprocessor lines are blanked first, then a `{` opened at namespace or
class scope whose head has a parameter list is a function, and everything inside it (lambdas,
local classes) belongs to it. A lambda bound at namespace scope counts as a function.
"""
import re
import sys
from pathlib import Path

# Functions over 120 lines in src/ as of the last split (23 when this check was written on
# 2026-12-03, after the importers moved to src/import). Lower it with each split; never raise it.
MAX_OVER_120 = 0
LONG = 80
TOO_LONG = 120
# Where the runtime is defined: the enum and the registry of its rows. A switch anywhere else is a
# place a new runtime must be added.
RUNTIME_HOME = {"spec/plan.hpp", "spec/plan.cpp", "spec/runtimes.hpp", "spec/runtimes.cpp", "spec/runtime_traits.hpp"}
RUNTIME_SWITCH = re.compile(r"\bruntime\s*[=!]=|\bRuntime::")


def blank(text):
    """The text with comments, literals and preprocessor lines replaced by spaces (newlines kept,
    so line numbers still hold)."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            # A preprocessor line, with its backslash continuations.
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "\n":
            at_line_start = True
            out.append(c)
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) \
                or (c in "uUL8" and re.match(r'(?:u8|u|U|L)R"', text[i:i + 4]) and (i == 0 or not text[i - 1].isalnum())):
            q = text.index('"', i)
            paren = text.index("(", q)
            delim = ")" + text[q + 1:paren] + '"'
            j = text.find(delim, paren)
            j = n if j < 0 else j + len(delim)
            out.append(" " + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + " ")
            i = j
        elif c == '"' or (c == "'" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))):
            # A literal; a quote after a digit or letter is a digit separator (1'048'576).
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_template_prefix(head):
    """`template <...> T f(...)` -> `T f(...)` (the angle brackets may hold `=` and `(`)."""
    while True:
        m = re.match(r"\s*template\s*<", head)
        if not m:
            return head
        depth, j = 1, m.end()
        while j < len(head) and depth:
            depth += {"<": 1, ">": -1}.get(head[j], 0)
            j += 1
        head = head[j:]


def top_level(head):
    """The head with everything inside () [] <> removed but the brackets themselves, for finding
    `=` and `:` that are not arguments."""
    out, depth = [], 0
    for ch in head:
        if ch in "([":
            if depth == 0:
                out.append(ch)
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth == 0:
                out.append(ch)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def classify(head):
    """What a `{` at namespace or class scope opens: namespace, class, function, init (a
    member-initializer brace inside a constructor's head) or data."""
    h = strip_template_prefix(head).strip()
    if re.match(r"(inline\s+)?namespace\b", h) or re.fullmatch(r"extern\s*\"\s*\"", h) or h == "extern":
        return "namespace", None
    flat = top_level(re.sub(r"\boperator\s*(\(\)|[^\s(]+)", "operator", h))
    if re.match(r"((typedef|using)\s+)?(class|struct|union|enum)\b", flat) and "(" not in flat:
        return "class", None
    if re.search(r"\)\s*(const\s*)?(noexcept\s*)?:", flat) and re.search(r"[A-Za-z_0-9>]\s*$", flat):
        return "init", None  # Foo::Foo() : a_{...}
    if "=" in flat:
        m = re.search(r"([A-Za-z_][A-Za-z_0-9]*)\s*=\s*\[", flat)
        if m and re.search(r"\]\s*(\(\))?[^=]*$", flat):
            return "function", m.group(1)  # a lambda bound at namespace scope
        return "data", None
    if "(" not in flat:
        return "data", None
    # The name is what precedes the first top-level parameter list.
    before = h[:len(h) - len(h.lstrip())] + h.lstrip()
    m = None
    for m in re.finditer(r"((?:[A-Za-z_][A-Za-z_0-9]*\s*(?:<[^(){};]*>)?\s*::\s*)*~?(?:operator\s*(?:\(\)|[^\s(]+)|[A-Za-z_][A-Za-z_0-9]*))\s*\(", before):
        break
    name = re.sub(r"\s+", "", m.group(1)) if m else "?"
    if name in ("if", "for", "while", "switch", "catch"):
        return "data", None
    return "function", name


def functions(text):
    """(name, first line, last line) of every function in one source text."""
    code = blank(text)
    line_of = [0] * (len(code) + 1)
    line = 1
    for i, ch in enumerate(code):
        line_of[i] = line
        if ch == "\n":
            line += 1
    line_of[len(code)] = line
    found = []
    stack = []  # (kind, name, start offset)
    head_start = 0
    i = 0
    while i < len(code):
        ch = code[i]
        inside_function = any(k == "function" for k, _, _ in stack)
        if ch == "{":
            if inside_function:
                stack.append(("block", None, i))
            else:
                head = code[head_start:i]
                kind, name = classify(head)
                if kind == "init" or head.count("(") > head.count(")"):
                    stack.append(("init", None, i))
                    i += 1
                    continue
                start = head_start + len(head) - len(strip_template_prefix(head).lstrip())
                stack.append((kind, name, start))
            head_start = i + 1
        elif ch == "}":
            kind, name, start = stack.pop() if stack else ("block", None, i)
            if kind == "function":
                found.append((name, line_of[start], line_of[i]))
            if kind != "init":
                head_start = i + 1
        elif ch == ";" and not inside_function and not (stack and stack[-1][0] == "init"):
            head_start = i + 1
        elif ch == ":" and not inside_function and re.search(r"\b(public|private|protected)\s*$", code[head_start:i]):
            head_start = i + 1
        i += 1
    return found


def comment_above(lines, first):
    """Whether the lines just above a function (1-based `first`) are a comment."""
    j = first - 2
    while j >= 0 and re.match(r"\s*(template\b.*|\[\[.*\]\])?\s*$", lines[j]):
        if lines[j].strip() == "":
            return False
        j -= 1
    return j >= 0 and lines[j].lstrip().startswith(("//", "/*", "*"))


def scan(src):
    rows, runtime_files = [], []
    for p in sorted(src.rglob("*")):
        if p.suffix not in (".cpp", ".hpp", ".cu", ".h"):
            continue
        text = p.read_text(encoding="utf-8")
        rel = p.relative_to(src).as_posix()
        lines = text.split("\n")
        for name, first, last in functions(text):
            rows.append((last - first + 1, rel, first, name, comment_above(lines, first)))
        if rel not in RUNTIME_HOME and RUNTIME_SWITCH.search(blank(text)):
            runtime_files.append(rel)
    return rows, runtime_files


SELF_TEST = r'''
#include <x>
#define BRACE {
namespace a {
namespace {
const char* s = "{ not a brace }";
const char* r = R"json({"k": {"v": 1}})json";
constexpr long n = 1'048'576;
const char c = '{';
struct S : Base {
  int x{0};
  S() : x_{1}, y_(2) {
    int v = 0;
  }
  bool operator==(const S& o) const { return x == o.x; }
 public:
  int get() const noexcept { return x; }
};
enum class E : int { a, b };
const auto twice = [](int v) {
  return 2 * v;
};
}  // namespace
// why: long
template <typename T, typename U = std::less<>>
T pick(T a,
       U u = U{}) {
  if (a) { return a; }
  auto l = [&](int k) { struct Local { int f() { return 1; } }; return k; };
  /* } */
  return T{};
}
}  // namespace a
int main() { return 0; }
'''
SELF_TEST_EXPECTED = [("S", 12, 14), ("operator==", 15, 15), ("get", 17, 17), ("twice", 20, 22),
                      ("pick", 26, 32), ("main", 34, 34)]


def self_test():
    got = functions(SELF_TEST)
    if got != SELF_TEST_EXPECTED:
        print(f"scanner self-test failed:\n  got      {got}\n  expected {SELF_TEST_EXPECTED}")
        return 1
    lines = SELF_TEST.split("\n")
    if not comment_above(lines, 26) or comment_above(lines, 34):
        print("scanner self-test failed: comment_above")
        return 1
    print("scanner self-test passed")
    return 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    if self_test() != 0:
        return 1
    src = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "src"
    rows, runtime_files = scan(src)
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    over_long = [r for r in rows if r[0] > LONG]
    over_too_long = [r for r in rows if r[0] > TOO_LONG]
    unexplained = [r for r in over_long if not r[4]]
    print(f"{len(rows)} functions in {src}")
    print(f"functions over {TOO_LONG} lines: {len(over_too_long)} (ceiling {MAX_OVER_120}, goal 0)")
    print(f"functions over {LONG} lines: {len(over_long)}, {len(unexplained)} of them without a comment above")
    for length, rel, first, name, commented in over_long:
        mark = "!!" if length > TOO_LONG else "  "
        print(f"  {mark} {length:4d}  {rel}:{first}  {name}{'' if commented else '  (no comment)'}")
    print(f"files switching on the runtime outside {', '.join(sorted(RUNTIME_HOME))}: {len(runtime_files)}")
    for rel in runtime_files:
        print(f"     {rel}")
    if len(rows) < 100:
        print(f"FAIL: only {len(rows)} functions found under {src}: the scanner or the path is wrong")
        return 1
    if len(over_too_long) > MAX_OVER_120:
        print(f"FAIL: {len(over_too_long)} functions over {TOO_LONG} lines, more than the {MAX_OVER_120} "
              "recorded: split the new one by its sections")
        return 1
    if len(over_too_long) < MAX_OVER_120:
        print(f"note: {len(over_too_long)} < {MAX_OVER_120}: lower MAX_OVER_120 in tests/code_shape.py")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
