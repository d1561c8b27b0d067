// compose-check loads a Compose file the way `docker compose config` does
// (github.com/compose-spec/compose-go/v2: schema validation, interpolation,
// normalization, consistency checks, env_file resolution) and fails with the
// loader's error. No Docker engine is needed. On top of the loader it checks
// what Compose itself only finds out at `up` time:
//
//   - every bind-mount source exists (Docker would silently create a missing
//     directory in place of a missing config file);
//   - every build context and Dockerfile exists; each Dockerfile parses with
//     BuildKit's own parser (github.com/moby/buildkit, what `docker build`
//     uses) without warnings or lint findings of its parse-level rules, and a
//     build `target` is one of its stages;
//   - every image is pinned to a tag (no `latest`, no bare name).
//
// Usage:
//
//	compose-check [-project-dir DIR] [-print WHAT] FILE...
//
// -print writes, after a successful check: `config` the normalized project
// (as `docker compose config`), `images` "SERVICE IMAGE" lines, `binds`
// "SERVICE SOURCE TARGET" lines (sources relative to the project dir),
// `command:SERVICE` the service's entrypoint and command, one argument a
// line, `env:SERVICE` its resolved environment (env_file and environment)
// as sorted KEY=VALUE lines.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

func main() {
	projectDir := flag.String("project-dir", "", "project directory (default: the first file's directory)")
	printWhat := flag.String("print", "", "config | images | binds | command:SERVICE | env:SERVICE")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: compose-check [-project-dir DIR] [-print config|images|binds|command:SERVICE|env:SERVICE] FILE...")
		flag.PrintDefaults()
	}
	flag.Parse()
	files := flag.Args()
	if len(files) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	project, err := load(files, *projectDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "compose-check: %v\n", err)
		os.Exit(1)
	}
	if problems := check(project); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(os.Stderr, "compose-check: %s\n", p)
		}
		os.Exit(1)
	}
	if err := output(project, *printWhat); err != nil {
		fmt.Fprintf(os.Stderr, "compose-check: %v\n", err)
		os.Exit(1)
	}
	if *printWhat == "" {
		fmt.Printf("compose-check: %s: %d services, %d volumes, %d networks: ok\n",
			strings.Join(files, ","), len(project.Services), len(project.Volumes), len(project.Networks))
	}
}

func load(files []string, projectDir string) (*types.Project, error) {
	if projectDir == "" {
		projectDir = filepath.Dir(files[0])
	}
	abs, err := filepath.Abs(projectDir)
	if err != nil {
		return nil, err
	}
	// Only the variables a user would have: the OS environment and the
	// project's .env. Schema validation and the consistency check are on
	// (they are by default; spelled out so nobody turns them off by accident).
	opts, err := cli.NewProjectOptions(files,
		cli.WithWorkingDirectory(abs),
		cli.WithOsEnv,
		cli.WithDotEnv,
		cli.WithInterpolation(true),
		cli.WithNormalization(true),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(context.Background())
}

// dockerfileStages parses a Dockerfile as BuildKit does and returns its
// stage names (lower-cased) and every parser warning and lint finding.
func dockerfileStages(path string) (map[string]bool, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		return nil, nil, err
	}
	var findings []string
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil {
			line = w.Location.Start.Line
		}
		findings = append(findings, fmt.Sprintf("line %d: %s", line, w.Short))
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		findings = append(findings, fmt.Sprintf("line %d: %s: %s", line, rule, msg))
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		return nil, nil, err
	}
	names := map[string]bool{}
	for _, st := range stages {
		if st.Name != "" {
			names[strings.ToLower(st.Name)] = true
		}
	}
	return names, findings, nil
}

func check(p *types.Project) []string {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				add("service %s: bind mount source %s: %v", name, rel(p, v.Source), errors.Unwrap(err))
			}
		}
		if s.Build != nil {
			ctxDir := s.Build.Context
			if st, err := os.Stat(ctxDir); err != nil || !st.IsDir() {
				add("service %s: build context %s is not a directory", name, rel(p, ctxDir))
				continue
			}
			if s.Build.DockerfileInline != "" {
				continue
			}
			df := s.Build.Dockerfile
			if df == "" {
				df = "Dockerfile"
			}
			if !filepath.IsAbs(df) {
				df = filepath.Join(ctxDir, df)
			}
			stages, findings, err := dockerfileStages(df)
			if err != nil {
				add("service %s: %s: %v", name, rel(p, df), err)
				continue
			}
			for _, f := range findings {
				add("service %s: %s: %s", name, rel(p, df), f)
			}
			if t := s.Build.Target; t != "" && !stages[strings.ToLower(t)] {
				add("service %s: build target %q is not a stage of %s", name, t, rel(p, df))
			}
		}
		if s.Image != "" && s.Build == nil {
			if !pinned(s.Image) {
				add("service %s: image %s is not pinned to a version tag", name, s.Image)
			}
		}
	}
	return problems
}

// pinned: the image names a tag other than latest, or a digest.
func pinned(image string) bool {
	if strings.Contains(image, "@sha256:") {
		return true
	}
	last := image[strings.LastIndex(image, "/")+1:]
	i := strings.LastIndex(last, ":")
	return i >= 0 && last[i+1:] != "" && last[i+1:] != "latest"
}

func rel(p *types.Project, path string) string {
	if r, err := filepath.Rel(p.WorkingDir, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

func output(p *types.Project, what string) error {
	switch {
	case what == "":
		return nil
	case what == "config":
		b, err := p.MarshalYAML()
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(b)
		return err
	case what == "images":
		for _, name := range p.ServiceNames() {
			if img := p.Services[name].Image; img != "" {
				fmt.Printf("%s %s\n", name, img)
			}
		}
	case what == "binds":
		var lines []string
		for _, name := range p.ServiceNames() {
			for _, v := range p.Services[name].Volumes {
				if v.Type == types.VolumeTypeBind {
					lines = append(lines, fmt.Sprintf("%s %s %s", name, rel(p, v.Source), v.Target))
				}
			}
		}
		sort.Strings(lines)
		for _, l := range lines {
			fmt.Println(l)
		}
	case strings.HasPrefix(what, "command:"):
		name := strings.TrimPrefix(what, "command:")
		s, ok := p.Services[name]
		if !ok {
			return fmt.Errorf("no service %q", name)
		}
		for _, a := range append(append([]string{}, s.Entrypoint...), s.Command...) {
			fmt.Println(a)
		}
	case strings.HasPrefix(what, "env:"):
		name := strings.TrimPrefix(what, "env:")
		s, ok := p.Services[name]
		if !ok {
			return fmt.Errorf("no service %q", name)
		}
		var lines []string
		for k, v := range s.Environment {
			if v == nil {
				lines = append(lines, k)
			} else {
				lines = append(lines, k+"="+*v)
			}
		}
		sort.Strings(lines)
		for _, l := range lines {
			fmt.Println(l)
		}
	default:
		return fmt.Errorf("-print %q: want config, images, binds, command:SERVICE or env:SERVICE", what)
	}
	return nil
}
