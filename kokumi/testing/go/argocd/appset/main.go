// Command argocd-appset-clusters runs an ApplicationSet through Argo CD's own ApplicationSet code
// (applicationset/generators and the controller's applicationset/controllers/template) against a
// real API server, without the controller around it: the cluster generator lists the cluster
// Secrets in Argo CD's namespace as the controller does, and the controller's renderer makes the
// Applications. It prints one JSON object: each generator's params (after the generator's own
// selector) and the Applications the controller would create or update. Nothing is written.
//
// Only the generators that need nothing but the API server are wired in (clusters and list);
// an ApplicationSet naming another is refused, so a test cannot pass by skipping a generator.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/argoproj/argo-cd/v3/applicationset/controllers/template"
	"github.com/argoproj/argo-cd/v3/applicationset/generators"
	"github.com/argoproj/argo-cd/v3/applicationset/utils"
	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
)

type generated struct {
	// Params per entry of spec.generators, in order: what the template is rendered with.
	Generators [][]map[string]any `json:"generators"`
	// The Applications the controller would create or update, rendered by its own renderer.
	Applications []appv1.Application `json:"applications"`
}

// supported names the ApplicationSetGenerator fields wired in below; every other non-nil field
// is refused before Argo CD's code looks its generator up (it would find none and panic).
var supported = map[string]bool{"Clusters": true, "List": true, "Selector": true}

func checkGenerators(appSet *appv1.ApplicationSet) error {
	if len(appSet.Spec.Generators) == 0 {
		return errors.New("the ApplicationSet has no spec.generators")
	}
	for i := range appSet.Spec.Generators {
		v := reflect.ValueOf(appSet.Spec.Generators[i])
		for f := 0; f < v.NumField(); f++ {
			name := v.Type().Field(f).Name
			if !v.Field(f).IsNil() && !supported[name] {
				return fmt.Errorf("spec.generators[%d]: only the clusters and list generators are wired in, not %s", i, name)
			}
		}
	}
	return nil
}

func run(kubeconfig, namespace string, manifest []byte, out io.Writer) error {
	var appSet appv1.ApplicationSet
	if err := yaml.UnmarshalStrict(manifest, &appSet); err != nil {
		return fmt.Errorf("the ApplicationSet does not parse: %w", err)
	}
	if err := checkGenerators(&appSet); err != nil {
		return err
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(config, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	all := map[string]generators.Generator{
		"Clusters": generators.NewClusterGenerator(c, namespace),
		"List":     generators.NewListGenerator(),
	}
	result := generated{Generators: [][]map[string]any{}, Applications: []appv1.Application{}}
	for _, g := range appSet.Spec.Generators {
		transformed, err := generators.Transform(g, all, appSet.Spec.Template, &appSet, map[string]any{}, c)
		if err != nil {
			return fmt.Errorf("generator: %w", err)
		}
		params := []map[string]any{}
		for _, t := range transformed {
			params = append(params, t.Params...)
		}
		result.Generators = append(result.Generators, params)
	}
	apps, reason, err := template.GenerateApplications(log.WithField("applicationset", appSet.Name), appSet, all, &utils.Render{}, c)
	if err != nil {
		return fmt.Errorf("%s: %w", reason, err)
	}
	result.Applications = append(result.Applications, apps...)
	encoded, err := json.MarshalIndent(result, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(encoded))
	return err
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server holding Argo CD's cluster Secrets")
	namespace := flag.String("namespace", "argocd", "Argo CD's namespace, where its cluster Secrets are")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: argocd-appset-clusters --kubeconfig FILE [--namespace NS] APPLICATIONSET.yaml|-")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *kubeconfig == "" || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	// The controller logs every generation at info; only its warnings and errors matter here.
	log.SetLevel(log.WarnLevel)
	log.SetOutput(os.Stderr)
	var manifest []byte
	var err error
	if flag.Arg(0) == "-" {
		manifest, err = io.ReadAll(os.Stdin)
	} else {
		manifest, err = os.ReadFile(flag.Arg(0))
	}
	if err == nil {
		err = run(*kubeconfig, *namespace, manifest, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
