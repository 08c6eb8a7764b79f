package image_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, its continuation lines joined.
type instruction struct {
	line  int               // line of its first line, for messages
	cmd   string            // upper case: FROM, COPY, RUN, ...
	flags map[string]string // leading --name=value flags, e.g. from: builder
	args  string            // the rest
}

// words returns the arguments: the elements of the JSON (exec) form, or the whitespace-separated words.
func (in instruction) words() []string {
	if list, ok := in.execForm(); ok {
		return list
	}
	return strings.Fields(in.args)
}

// execForm returns the elements of a JSON array argument, as in ENTRYPOINT ["/celaudit"].
func (in instruction) execForm() ([]string, bool) {
	if !strings.HasPrefix(in.args, "[") {
		return nil, false
	}
	var list []string
	if err := json.Unmarshal([]byte(in.args), &list); err != nil {
		return nil, false
	}
	return list, true
}

// stage is a FROM and the instructions up to the next FROM.
type stage struct {
	base, name   string
	instructions []instruction
}

// last returns the stage's last instruction of that command.
func (s stage) last(cmd string) (instruction, bool) {
	for i := len(s.instructions) - 1; i >= 0; i-- {
		if s.instructions[i].cmd == cmd {
			return s.instructions[i], true
		}
	}
	return instruction{}, false
}

// all returns the stage's instructions of that command.
func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.instructions {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// dockerfile is a parsed Dockerfile: its global ARGs (before the first FROM) and its stages.
type dockerfile struct {
	globalArgs []instruction
	stages     []stage
}

func (d dockerfile) stage(name string) (stage, bool) {
	for _, s := range d.stages {
		if s.name == name {
			return s, true
		}
	}
	return stage{}, false
}

func (d dockerfile) final() stage { return d.stages[len(d.stages)-1] }

// parseDockerfile parses the instructions of a Dockerfile: comments and blank lines are dropped, a line ending
// with a backslash continues on the next one.
func parseDockerfile(text string) (dockerfile, error) {
	var (
		d       dockerfile
		pending string
		start   int
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if pending == "" {
			start = n
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending += cont + " "
			continue
		}
		if err := d.add(start, pending+line); err != nil {
			return dockerfile{}, err
		}
		pending = ""
	}
	if pending != "" {
		return dockerfile{}, fmt.Errorf("line %d: the last instruction ends with a backslash", start)
	}
	if len(d.stages) == 0 {
		return dockerfile{}, fmt.Errorf("no FROM")
	}
	return d, sc.Err()
}

func (d *dockerfile) add(line int, text string) error {
	cmd, rest, _ := strings.Cut(text, " ")
	in := instruction{line: line, cmd: strings.ToUpper(cmd), flags: map[string]string{}}
	rest = strings.TrimSpace(rest)
	// Only these take flags; for CMD and ENTRYPOINT a leading --name is an argument.
	takesFlags := in.cmd == "FROM" || in.cmd == "COPY" || in.cmd == "ADD" || in.cmd == "RUN"
	for takesFlags && strings.HasPrefix(rest, "--") {
		flag, after, _ := strings.Cut(rest, " ")
		name, value, _ := strings.Cut(strings.TrimPrefix(flag, "--"), "=")
		in.flags[name] = value
		rest = strings.TrimSpace(after)
	}
	in.args = rest
	switch {
	case in.cmd == "FROM":
		w := strings.Fields(rest)
		s := stage{base: w[0]}
		if len(w) == 3 && strings.EqualFold(w[1], "AS") {
			s.name = w[2]
		} else if len(w) != 1 {
			return fmt.Errorf("line %d: FROM %s: want an image and an optional AS name", line, rest)
		}
		d.stages = append(d.stages, s)
	case len(d.stages) == 0 && in.cmd == "ARG":
		d.globalArgs = append(d.globalArgs, in)
	case len(d.stages) == 0:
		return fmt.Errorf("line %d: %s before the first FROM", line, in.cmd)
	default:
		s := &d.stages[len(d.stages)-1]
		s.instructions = append(s.instructions, in)
	}
	return nil
}

// dockerignore holds the rules of a .dockerignore file, in order: as in Docker, the last rule that matches a
// path (or one of its parent directories) decides, and a rule starting with "!" keeps what earlier ones left out.
type dockerignore []ignoreRule

// ignoreRule is one line of a .dockerignore file.
type ignoreRule struct {
	keep    bool           // an exception ("!pattern")
	pattern *regexp.Regexp // the pattern, anchored, over slash-separated paths relative to the context
}

// readDockerignore reads the rules of .dockerignore in dir; none when it is absent.
func readDockerignore(dir string) (dockerignore, error) {
	data, err := os.ReadFile(filepath.Join(dir, ".dockerignore"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out dockerignore
	for _, line := range strings.Split(string(data), "\n") {
		p := strings.TrimSpace(line)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		rule := ignoreRule{keep: strings.HasPrefix(p, "!")}
		p = strings.TrimPrefix(path.Clean(strings.TrimPrefix(p, "!")), "/")
		if rule.pattern, err = ignorePattern(p); err != nil {
			return nil, fmt.Errorf(".dockerignore pattern %q: %w", p, err)
		}
		out = append(out, rule)
	}
	return out, nil
}

// ignorePattern translates a .dockerignore pattern into a regular expression with Docker's meaning: "*" and
// "?" stay within one path element, "**" spans any number of them, [...] is a character class.
func ignorePattern(p string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case strings.HasPrefix(p[i:], "**/"):
			b.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(p[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			end := strings.IndexByte(p[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unterminated character class")
			}
			class := p[i+1 : i+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + class + "]")
			i += end
		case c == '\\' && i+1 < len(p):
			i++
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// excludes reports whether the build context leaves out rel (slash-separated, relative to the context).
func (ig dockerignore) excludes(rel string) bool {
	excluded := false
	for _, rule := range ig {
		for p := rel; p != "." && p != "/" && p != ""; p = path.Dir(p) {
			if rule.pattern.MatchString(p) {
				excluded = !rule.keep
				break
			}
		}
	}
	return excluded
}

// TestDockerignore checks the .dockerignore rules against Docker's documented meaning, so that the replayed
// build context leaves out what a real build's would, and no more.
func TestDockerignore(t *testing.T) {
	dir := t.TempDir()
	rules := "# comment\n/bin\n*.md\n!README.md\ndocs/**/*.png\ntmp?\nbuild/[!k]*\n"
	if err := os.WriteFile(filepath.Join(dir, ".dockerignore"), []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	ig, err := readDockerignore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]bool{
		"bin": true, "bin/manager": true, "cmd/bin": false,
		"NOTES.md": true, "README.md": false, "docs/a.md": false, // *.md matches at the top only
		"docs/x.png": true, "docs/a/b/x.png": true, "docs/x.jpg": false,
		"tmp1": true, "tmp12": false, "tmp1/f": true,
		"build/out": true, "build/keep": false,
		"main.go": false,
	} {
		if got := ig.excludes(rel); got != want {
			t.Errorf("excludes(%q) = %v, want %v", rel, got, want)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".dockerignore"), []byte("a[b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readDockerignore(dir); err == nil || !strings.Contains(err.Error(), `"a[b"`) {
		t.Errorf("an unterminated character class: %v, want an error naming the pattern", err)
	}
}
