package image_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
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

// dockerignore holds the patterns of a .dockerignore file.
type dockerignore []string

// readDockerignore reads the patterns of .dockerignore in dir; none when it is absent. Exceptions (!) and **
// are refused: excludes does not implement them.
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
		if strings.HasPrefix(p, "!") || strings.Contains(p, "**") {
			return nil, fmt.Errorf(".dockerignore pattern %q: exceptions and ** are not implemented by this test", p)
		}
		out = append(out, strings.TrimPrefix(path.Clean(p), "/"))
	}
	return out, nil
}

// excludes reports whether the build context leaves out rel (slash-separated, relative to the context): a
// pattern matches it or one of its parent directories, as in Docker.
func (ig dockerignore) excludes(rel string) bool {
	for p := rel; p != "." && p != "/" && p != ""; p = path.Dir(p) {
		for _, pattern := range ig {
			if ok, _ := path.Match(pattern, p); ok {
				return true
			}
		}
	}
	return false
}
