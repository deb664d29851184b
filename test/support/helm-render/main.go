// helm-render renders a Helm chart directory the way `helm template` does, for what the chart in
// deploy/helm/sluice uses, with Go's text/template (Helm's template language) and sprig (Helm's
// function library), both from Debian packages, so the chart is checked in CI without Helm.
//
// Supported: .Values (the chart's values.yaml deep-merged with each -f file, then each --set
// a.b=value; null removes a key), .Release.{Name,Namespace,Service,IsInstall,Revision},
// .Chart.{Name,Version,AppVersion,Description}, sprig's TxtFuncMap (without env/expandenv, as in
// Helm), and Helm's own include, tpl, required, toYaml, fromYaml, toJson, fromJson. Templates are
// every file under templates/; those whose name starts with "_" (partials) and NOTES.txt are not
// output. Numbers in values are float64, as in Helm (its values pass through JSON). Not supported:
// subcharts, .Files, .Capabilities, lookup, hooks, schema validation: the chart must not use them.
//
// Usage: helm-render [--name N] [--namespace NS] [-f values.yaml]... [--set a.b=v]... CHART_DIR
// Output: the rendered documents, each after "---" and a "# Source:" line, as helm template prints
// them, in the order of the template files' names (Helm orders them by kind).
//
// Built offline in GOPATH mode from Debian's sources (test/support/helm.ts does it):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE=$(mktemp -d) go build -o helm-render .
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v3"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "helm-render: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	name, namespace := "sluice", "default"
	var files, sets multi
	var chart string
	for i := 0; i < len(args); i++ {
		next := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", args[i])
			}
			i++
			return args[i], nil
		}
		var err error
		switch args[i] {
		case "--name":
			name, err = next()
		case "--namespace", "-n":
			namespace, err = next()
		case "-f", "--values":
			var v string
			v, err = next()
			files = append(files, v)
		case "--set":
			var v string
			v, err = next()
			sets = append(sets, v)
		default:
			if strings.HasPrefix(args[i], "-") {
				return fmt.Errorf("unknown option %s", args[i])
			}
			chart = args[i]
		}
		if err != nil {
			return err
		}
	}
	if chart == "" {
		return fmt.Errorf("usage: helm-render [--name N] [--namespace NS] [-f values.yaml]... [--set a.b=v]... CHART_DIR")
	}
	meta, err := readYaml(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		return err
	}
	values, err := readYaml(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return err
	}
	for _, f := range files {
		override, err := readYaml(f)
		if err != nil {
			return err
		}
		values = merge(values, override)
	}
	for _, s := range sets {
		if err := setValue(values, s); err != nil {
			return err
		}
	}
	values, err = viaJSON(values)
	if err != nil {
		return err
	}
	top := map[string]interface{}{
		"Values":  values,
		"Release": map[string]interface{}{"Name": name, "Namespace": namespace, "Service": "Helm", "IsInstall": true, "IsUpgrade": false, "Revision": 1},
		"Chart":   map[string]interface{}{"Name": meta["name"], "Version": meta["version"], "AppVersion": meta["appVersion"], "Description": meta["description"]},
	}
	chartName := fmt.Sprint(meta["name"])
	out, err := render(chart, chartName, top)
	if err != nil {
		return err
	}
	_, err = os.Stdout.WriteString(out)
	return err
}

func readYaml(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return out, nil
}

// merge deep-merges override into base (override wins; a null in override removes the key), as Helm coalesces values.
func merge(base, override map[string]interface{}) map[string]interface{} {
	for k, v := range override {
		if v == nil {
			delete(base, k)
			continue
		}
		if vm, ok := v.(map[string]interface{}); ok {
			if bm, ok := base[k].(map[string]interface{}); ok {
				base[k] = merge(bm, vm)
				continue
			}
		}
		base[k] = v
	}
	return base
}

// setValue applies one --set a.b.c=value (value typed as Helm's strvals does: int, bool, null, else string).
func setValue(values map[string]interface{}, assignment string) error {
	eq := strings.Index(assignment, "=")
	if eq < 1 {
		return fmt.Errorf("--set %q: expected key=value", assignment)
	}
	path := strings.Split(assignment[:eq], ".")
	raw := assignment[eq+1:]
	var value interface{} = raw
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
		value = n
	} else if raw == "true" || raw == "false" {
		value = raw == "true"
	} else if raw == "null" {
		value = nil
	}
	node := values
	for _, key := range path[:len(path)-1] {
		child, ok := node[key].(map[string]interface{})
		if !ok {
			child = map[string]interface{}{}
			node[key] = child
		}
		node = child
	}
	if value == nil {
		delete(node, path[len(path)-1])
	} else {
		node[path[len(path)-1]] = value
	}
	return nil
}

// viaJSON gives values the types Helm's templates see (numbers float64, maps map[string]interface{}).
func viaJSON(v map[string]interface{}) (map[string]interface{}, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	return out, json.Unmarshal(data, &out)
}

func toYaml(v interface{}) string {
	// As Helm: through JSON first (so struct tags and number types match), then YAML, 2-space indent.
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var plain interface{}
	if err := json.Unmarshal(data, &plain); err != nil {
		return ""
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(plain); err != nil {
		return ""
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func fromYaml(text string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(text), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func fromJSON(text string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func render(chart, chartName string, top map[string]interface{}) (string, error) {
	root := template.New("gotpl")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	funcs["toYaml"] = toYaml
	funcs["fromYaml"] = fromYaml
	funcs["toJson"] = toJSON
	funcs["fromJson"] = fromJSON
	funcs["required"] = func(message string, v interface{}) (interface{}, error) {
		if v == nil || v == "" {
			return v, fmt.Errorf("%s", message)
		}
		return v, nil
	}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		err := root.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		err = t.Execute(&buf, data)
		return buf.String(), err
	}
	root.Funcs(funcs).Option("missingkey=zero")
	var names []string
	dir := filepath.Join(chart, "templates")
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chart, path)
		name := chartName + "/" + filepath.ToSlash(rel)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if _, err := root.New(name).Parse(string(data)); err != nil {
			return err
		}
		names = append(names, name)
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	var out strings.Builder
	for _, name := range names {
		base := filepath.Base(name)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			continue
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, top); err != nil {
			return "", err
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, strings.TrimSpace(text))
	}
	return out.String(), nil
}
