// Command argocd-lua-health runs every health_test.yaml case under a resource_customizations folder
// (Argo CD's layout: <group>/<kind>/health.lua, health_test.yaml, testdata/) through Argo CD's own
// util/lua, the way an argocd-cm `resource.customizations.health.<group>_<kind>` entry runs: the
// script given as a resource override, standard libraries off. It prints one JSON object per case
// (the expected and the actual health, or the error) and leaves the comparison to the caller, so a
// wrong expectation shows both sides.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

type testFile struct {
	Tests []struct {
		InputPath    string               `json:"inputPath"`
		HealthStatus *health.HealthStatus `json:"healthStatus"`
	} `json:"tests"`
}

type result struct {
	Key       string               `json:"key"`
	InputPath string               `json:"inputPath"`
	Expected  *health.HealthStatus `json:"expected"`
	Actual    *health.HealthStatus `json:"actual"`
	Error     string               `json:"error,omitempty"`
}

func run(root string) ([]result, error) {
	var results []result
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "health.lua" {
			return err
		}
		dir := filepath.Dir(path)
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			return err
		}
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if len(parts) != 2 {
			return fmt.Errorf("%s: expected <group>/<kind>/health.lua", path)
		}
		key := parts[0] + "/" + parts[1]
		script, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		raw, err := os.ReadFile(filepath.Join(dir, "health_test.yaml"))
		if err != nil {
			return err
		}
		var tests testFile
		if err := yaml.Unmarshal(raw, &tests); err != nil {
			return fmt.Errorf("%s/health_test.yaml: %w", dir, err)
		}
		vm := lua.VM{ResourceOverrides: map[string]appv1.ResourceOverride{key: {HealthLua: string(script)}}}
		for _, tc := range tests.Tests {
			r := result{Key: key, InputPath: tc.InputPath, Expected: tc.HealthStatus}
			objRaw, err := os.ReadFile(filepath.Join(dir, tc.InputPath))
			if err != nil {
				return err
			}
			obj := map[string]any{}
			if err := yaml.Unmarshal(objRaw, &obj); err != nil {
				return fmt.Errorf("%s: %w", tc.InputPath, err)
			}
			u := &unstructured.Unstructured{Object: obj}
			found, _, err := vm.GetHealthScript(u)
			if err != nil {
				r.Error = err.Error()
			} else if found == "" {
				r.Error = fmt.Sprintf("no health script for %s (apiVersion/kind of %s)", key, tc.InputPath)
			} else if actual, err := vm.ExecuteHealthLua(u, found); err != nil {
				r.Error = err.Error()
			} else {
				r.Actual = actual
			}
			results = append(results, r)
		}
		return nil
	})
	return results, err
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: argocd-lua-health RESOURCE_CUSTOMIZATIONS_DIR")
		os.Exit(2)
	}
	results, err := run(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
