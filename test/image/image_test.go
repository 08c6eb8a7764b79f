package image_test

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/test/envtestutil"
)

var repoRoot = envtestutil.RepoRoot()

func readDockerfile(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func mustParse(t *testing.T, text string) dockerfile {
	t.Helper()
	d, err := parseDockerfile(text)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	return d
}

// TestDockerfileBuildsFromItsCopies replays the builder stage from exactly the paths it copies and checks that
// the binary the runtime stage takes from it is statically linked.
func TestDockerfileBuildsFromItsCopies(t *testing.T) {
	t.Parallel()
	d := mustParse(t, readDockerfile(t))
	root := t.TempDir()
	bin, err := replayBuild(t, d, root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range staticProblems(t, bin) {
		t.Error(p)
	}
}

// TestDockerfileMissingCopyFailsTheBuild removes each COPY line of the builder stage in turn: every path it
// copies is needed, and the replay notices a missing one (the failure TestDockerfileBuildsFromItsCopies
// reports when a new top-level package is not copied).
func TestDockerfileMissingCopyFailsTheBuild(t *testing.T) {
	t.Parallel()
	text := readDockerfile(t)
	d := mustParse(t, text)
	builder := builderStage(t, d)
	copies := 0
	for _, in := range builder.all("COPY") {
		if in.flags["from"] != "" {
			continue
		}
		copies++
		t.Run(in.args, func(t *testing.T) {
			t.Parallel()
			lines := strings.Split(text, "\n")
			lines[in.line-1] = "# removed by the test"
			_, err := replayBuild(t, mustParse(t, strings.Join(lines, "\n")), t.TempDir())
			if err == nil {
				t.Errorf("the build succeeded without COPY %s (line %d)", in.args, in.line)
			}
			t.Logf("without COPY %s: %v", in.args, err)
		})
	}
	if copies == 0 {
		t.Fatal("the builder stage copies nothing from the repository")
	}
}

// builderStage returns the stage the runtime stage copies its binary from.
func builderStage(t *testing.T, d dockerfile) stage {
	t.Helper()
	cp, ok := binaryCopy(d.final())
	if !ok {
		t.Fatal("the runtime stage copies no binary from another stage (COPY --from=<stage>)")
	}
	s, ok := d.stage(cp.flags["from"])
	if !ok {
		t.Fatalf("COPY --from=%s: no stage of that name", cp.flags["from"])
	}
	return s
}

// binaryCopy returns the runtime stage's COPY --from instruction.
func binaryCopy(s stage) (instruction, bool) {
	for _, in := range s.all("COPY") {
		if in.flags["from"] != "" {
			return in, true
		}
	}
	return instruction{}, false
}

// replayBuild replays the builder stage in root, which stands for the container's /, and returns the path in
// root of the binary the runtime stage copies. A failed RUN is returned as an error with its output.
func replayBuild(t *testing.T, d dockerfile, root string) (string, error) {
	t.Helper()
	builder := builderStage(t, d)
	ignore, err := readDockerignore(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	r := &replay{t: t, root: root, workdir: "/", env: buildEnv(t), ignore: ignore}
	for _, in := range d.globalArgs {
		r.arg(in)
	}
	for _, in := range builder.instructions {
		if err := r.do(in); err != nil {
			return "", fmt.Errorf("line %d: %s %s: %w", in.line, in.cmd, in.args, err)
		}
	}
	cp, _ := binaryCopy(d.final())
	w := cp.words()
	if len(w) != 2 {
		return "", fmt.Errorf("line %d: COPY %s: want one source and one destination", cp.line, cp.args)
	}
	bin := r.host(w[0])
	fi, err := os.Stat(bin)
	if err != nil {
		return "", fmt.Errorf("the runtime stage copies %s from stage %s, which the build did not produce: %w", w[0], builder.name, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("the runtime stage copies %s from stage %s, where the build made no regular file", w[0], builder.name)
	}
	return bin, nil
}

// buildEnv is the environment of the RUN lines: the builder image has no Go settings of the caller's, and the
// replay is offline, from the local module and build caches.
func buildEnv(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	caches := strings.Fields(string(out))
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "GO") && !strings.HasPrefix(k, "CGO_") {
			env[k] = v
		}
	}
	for k, v := range map[string]string{
		"GOMODCACHE": caches[0], "GOCACHE": caches[1], "GOENV": "off", "GOWORK": "off",
		"GOFLAGS": "-mod=readonly", "GOPROXY": "off", "GOTOOLCHAIN": "local",
		// What `docker buildx build` sets for the target platform: this machine's architecture, whose
		// compiled packages the build cache already holds.
		"TARGETOS": "linux", "TARGETARCH": runtime.GOARCH,
	} {
		env[k] = v
	}
	return env
}

// replay carries out a stage's instructions on the local file system.
type replay struct {
	t       *testing.T
	root    string            // stands for the container's /
	workdir string            // the container's working directory
	env     map[string]string // environment of RUN: the caller's, the ARGs and the ENVs
	ignore  dockerignore
}

// host returns where the container path p (absolute, or relative to the working directory) lies in root.
func (r *replay) host(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(r.workdir, p)
	}
	return filepath.Join(r.root, filepath.FromSlash(p))
}

// arg declares a build argument: a value the build sets (buildEnv's) wins over the default.
func (r *replay) arg(in instruction) {
	name, value, _ := strings.Cut(in.args, "=")
	if _, set := r.env[name]; !set {
		r.env[name] = value
	}
}

func (r *replay) do(in instruction) error {
	switch in.cmd {
	case "ARG":
		r.arg(in)
	case "ENV":
		for _, kv := range in.words() {
			k, v, _ := strings.Cut(kv, "=")
			r.env[k] = strings.Trim(v, `"`)
		}
	case "WORKDIR":
		r.workdir = path.Join(r.workdir, in.args)
		return os.MkdirAll(r.host(r.workdir), 0o755)
	case "COPY":
		if in.flags["from"] != "" {
			return errors.New("copies from another stage: not replayed")
		}
		w := in.words()
		if len(w) < 2 {
			return errors.New("want sources and a destination")
		}
		return r.copy(w[:len(w)-1], w[len(w)-1])
	case "RUN":
		return r.run(in.args)
	case "ADD":
		return errors.New("ADD is not replayed: use COPY")
	}
	return nil
}

// run runs a RUN line with /bin/sh -c in the working directory, as Docker does in the builder image. It runs
// in its own process group, killed whole when the test's deadline nears, so that no compiler outlives the
// test.
func (r *replay) run(script string) error {
	ctx := context.Background()
	if deadline, ok := r.t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-30*time.Second))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Dir = r.host(r.workdir)
	for k, v := range r.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w\n%s", err, out.String())
	}
	return nil
}

// copy copies the sources, relative to the repository (the build context), to dst as COPY does: a directory's
// contents into dst, a file into dst when dst is a directory (it ends with / or ., or there are several
// sources) or to dst itself. What .dockerignore leaves out is not copied.
func (r *replay) copy(srcs []string, dst string) error {
	intoDir := len(srcs) > 1 || strings.HasSuffix(dst, "/") || path.Base(dst) == "."
	target := r.host(dst)
	for _, src := range srcs {
		matches, err := filepath.Glob(filepath.Join(repoRoot, filepath.FromSlash(src)))
		if err != nil || len(matches) == 0 {
			return fmt.Errorf("source %s: not in the build context", src)
		}
		for _, m := range matches {
			fi, err := os.Stat(m)
			if err != nil {
				return err
			}
			switch {
			case fi.IsDir():
				err = r.copyTree(m, target)
			case intoDir:
				err = r.copyFile(m, filepath.Join(target, filepath.Base(m)))
			default:
				err = r.copyFile(m, target)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *replay) copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if e.IsDir() {
			if r.excluded(p) {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		return r.copyFile(p, filepath.Join(dst, rel))
	})
}

func (r *replay) excluded(p string) bool {
	rel, err := filepath.Rel(repoRoot, p)
	return err == nil && r.ignore.excludes(filepath.ToSlash(rel))
}

func (r *replay) copyFile(src, dst string) error {
	if r.excluded(src) {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// staticProblems returns why the ELF binary would not run on an image without a C library: a program
// interpreter (the dynamic loader) or shared libraries it needs.
func staticProblems(t *testing.T, bin string) []string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	defer func() { _ = f.Close() }()
	var out []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			out = append(out, "the binary has a program interpreter (PT_INTERP): it is dynamically linked")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil {
		t.Fatalf("%s: %v", bin, err)
	} else if len(libs) > 0 {
		out = append(out, fmt.Sprintf("the binary needs shared libraries (DT_NEEDED): %v", libs))
	}
	return out
}

// TestStaticProblemsFound checks that staticProblems reports a dynamically linked binary: /bin/sh, which links
// the C library, as it does on every Linux distribution the tests run on.
func TestStaticProblemsFound(t *testing.T) {
	t.Parallel()
	problems := strings.Join(staticProblems(t, "/bin/sh"), "\n")
	for _, want := range []string{"PT_INTERP", "DT_NEEDED"} {
		if !strings.Contains(problems, want) {
			t.Errorf("/bin/sh: problems %q lack %s", problems, want)
		}
	}
}

// shellFree are the runtime bases without a shell or package manager: distroless static (its :debug tags add
// busybox) and scratch.
var shellFree = regexp.MustCompile(`^(scratch|gcr\.io/distroless/static(-debian[0-9]+)?(:[a-z0-9.-]+)?(@sha256:[0-9a-f]{64})?)$`)

// runtimeProblems returns what makes the runtime stage other than static, non-root and without a shell.
func runtimeProblems(d dockerfile) []string {
	s := d.final()
	var out []string
	if !shellFree.MatchString(s.base) || strings.Contains(s.base, "debug") {
		out = append(out, fmt.Sprintf("the runtime stage is FROM %s; want gcr.io/distroless/static (not :debug) or scratch, which have no shell", s.base))
	}
	if runs := s.all("RUN"); len(runs) > 0 {
		out = append(out, fmt.Sprintf("the runtime stage has RUN at line %d: it has no shell to run it, and must stay so", runs[0].line))
	}
	out = append(out, userProblems(s)...)
	return append(out, entrypointProblems(s)...)
}

// userProblems checks the runtime stage's USER: numeric (so that the kubelet can enforce runAsNonRoot) and
// not root.
func userProblems(s stage) []string {
	in, ok := s.last("USER")
	if !ok {
		return []string{"the runtime stage sets no USER: it would run as root"}
	}
	uid, gid, hasGroup := strings.Cut(in.args, ":")
	numeric := regexp.MustCompile(`^[0-9]+$`)
	if !numeric.MatchString(uid) || (hasGroup && !numeric.MatchString(gid)) {
		return []string{fmt.Sprintf("USER %s: want numeric ids, e.g. 65532:65532, so that runAsNonRoot can be verified", in.args)}
	}
	if strings.TrimLeft(uid, "0") == "" {
		return []string{fmt.Sprintf("USER %s: the user is root", in.args)}
	}
	return nil
}

// entrypointProblems checks that ENTRYPOINT is in exec form (no shell runs it) and names the binary copied
// from the builder, and that CMD, if any, is in exec form too.
func entrypointProblems(s stage) []string {
	var out []string
	ep, ok := s.last("ENTRYPOINT")
	list, exec := ep.execForm()
	switch {
	case !ok:
		out = append(out, "the runtime stage has no ENTRYPOINT")
	case !exec || len(list) == 0:
		out = append(out, fmt.Sprintf("ENTRYPOINT %s: want the exec form [\"/binary\", ...]; the shell form needs /bin/sh", ep.args))
	case list[0] != copiedBinary(s):
		out = append(out, fmt.Sprintf("ENTRYPOINT runs %s; the stage copies the binary to %s", list[0], copiedBinary(s)))
	}
	if cmd, ok := s.last("CMD"); ok {
		if _, exec := cmd.execForm(); !exec {
			out = append(out, fmt.Sprintf("CMD %s: want the exec form; the shell form needs /bin/sh", cmd.args))
		}
	}
	return out
}

// copiedBinary returns the path in the image of the binary the runtime stage copies from the builder.
func copiedBinary(s stage) string {
	cp, ok := binaryCopy(s)
	w := cp.words()
	if !ok || len(w) != 2 {
		return ""
	}
	workdir := "/"
	for _, in := range s.instructions {
		if in.cmd == "WORKDIR" {
			workdir = path.Join(workdir, in.args)
		}
		if in.line == cp.line {
			break
		}
	}
	dst := w[1]
	if !path.IsAbs(dst) {
		dst = path.Join(workdir, dst)
	}
	if strings.HasSuffix(w[1], "/") || path.Base(w[1]) == "." {
		dst = path.Join(dst, path.Base(w[0]))
	}
	return dst
}

// TestRuntimeStage checks the runtime stage of the Dockerfile, and that config/manager runs the binary it
// holds (the chart's Deployment is checked against config/manager in test/chart).
func TestRuntimeStage(t *testing.T) {
	t.Parallel()
	d := mustParse(t, readDockerfile(t))
	for _, p := range runtimeProblems(d) {
		t.Error(p)
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var deployment struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name    string   `json:"name"`
						Command []string `json:"command"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	found := false
	for _, doc := range strings.Split(string(data), "\n---") {
		if err := yaml.Unmarshal([]byte(doc), &deployment); err != nil {
			t.Fatalf("config/manager/manager.yaml: %v", err)
		}
		for _, c := range deployment.Spec.Template.Spec.Containers {
			if c.Name == "manager" {
				found = true
				if len(c.Command) == 0 || c.Command[0] != copiedBinary(d.final()) {
					t.Errorf("config/manager runs %v; the image holds the binary at %s", c.Command, copiedBinary(d.final()))
				}
			}
		}
	}
	if !found {
		t.Error("config/manager/manager.yaml has no container named manager")
	}
}

// TestRuntimeProblemsFound feeds runtimeProblems the Dockerfile with one defect each, so that TestRuntimeStage
// can fail: each must be reported, with the words given.
func TestRuntimeProblemsFound(t *testing.T) {
	t.Parallel()
	text := readDockerfile(t)
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"a base with a shell", "FROM gcr.io/distroless/static:nonroot", "FROM golang:1.26", "FROM golang:1.26"},
		{"distroless's debug tag, which has busybox", "FROM gcr.io/distroless/static:nonroot", "FROM gcr.io/distroless/static:debug-nonroot", "not :debug"},
		{"a RUN in the runtime stage", "USER 65532:65532", "RUN [\"/celaudit\", \"--help\"]\nUSER 65532:65532", "has RUN at line"},
		{"root", "USER 65532:65532", "USER 0:0", "the user is root"},
		{"a user name", "USER 65532:65532", "USER nonroot:nonroot", "want numeric ids"},
		{"no USER", "USER 65532:65532", "", "sets no USER"},
		{"a shell-form ENTRYPOINT", `ENTRYPOINT ["/celaudit"]`, "ENTRYPOINT /celaudit", "want the exec form"},
		{"another binary", `ENTRYPOINT ["/celaudit"]`, `ENTRYPOINT ["/manager"]`, "ENTRYPOINT runs /manager; the stage copies the binary to /celaudit"},
		{"a shell-form CMD", `ENTRYPOINT ["/celaudit"]`, "ENTRYPOINT [\"/celaudit\"]\nCMD --leader-elect", "CMD --leader-elect: want the exec form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(text, tc.old) {
				t.Fatalf("the Dockerfile no longer holds %q: update this case", tc.old)
			}
			problems := runtimeProblems(mustParse(t, strings.Replace(text, tc.old, tc.new, 1)))
			if !strings.Contains(strings.Join(problems, "\n"), tc.want) {
				t.Errorf("problems %q; want one containing %q", problems, tc.want)
			}
		})
	}
}
