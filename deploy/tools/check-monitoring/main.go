// Command check-monitoring decodes PodMonitor and PrometheusRule objects strictly into the
// Prometheus Operator's own Go types: a field the operator does not know, or a value of the
// wrong type, fails. kubernetes-validate knows only Kubernetes' built-in kinds, and the
// operator's CRDs are generated from these types, so this is the same schema a cluster's API
// server would apply.
//
//	check-monitoring FILE...
//
// Every YAML document of the operator's group (monitoring.coreos.com) must be a PodMonitor or
// a PrometheusRule, each decoded strictly; other groups' objects (a ConfigMap beside them) are
// kubernetes-validate's to check. A file with no PodMonitor or PrometheusRule fails.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	yamlv3 "gopkg.in/yaml.v3"
	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: check-monitoring FILE...")
		os.Exit(2)
	}
	failed := false
	for _, path := range os.Args[1:] {
		checked, err := checkFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			failed = true
			continue
		}
		fmt.Printf("%s: %d object(s) valid (strict)\n", path, checked)
	}
	if failed {
		os.Exit(1)
	}
}

func checkFile(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	decoder := yamlv3.NewDecoder(bytes.NewReader(data))
	checked := 0
	for {
		var node yamlv3.Node
		if err := decoder.Decode(&node); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return checked, err
		}
		document, err := yamlv3.Marshal(&node)
		if err != nil {
			return checked, err
		}
		ours, err := checkObject(document)
		if err != nil {
			return checked, fmt.Errorf("object %d: %w", checked+1, err)
		}
		if ours {
			checked++
		}
	}
	if checked == 0 {
		return 0, errors.New("no PodMonitor or PrometheusRule")
	}
	return checked, nil
}

// checkObject tells whether document is one of the operator's objects, and whether it is valid.
func checkObject(document []byte) (bool, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(document, &head); err != nil {
		return false, err
	}
	if !strings.HasPrefix(head.APIVersion, monitoringv1.SchemeGroupVersion.Group+"/") {
		return false, nil
	}
	if head.APIVersion != monitoringv1.SchemeGroupVersion.String() {
		return true, fmt.Errorf("apiVersion %q, expected %q", head.APIVersion, monitoringv1.SchemeGroupVersion)
	}
	switch head.Kind {
	case monitoringv1.PodMonitorsKind:
		var object monitoringv1.PodMonitor
		return true, yaml.UnmarshalStrict(document, &object)
	case monitoringv1.PrometheusRuleKind:
		var object monitoringv1.PrometheusRule
		if err := yaml.UnmarshalStrict(document, &object); err != nil {
			return true, err
		}
		if len(object.Spec.Groups) == 0 {
			return true, errors.New("a PrometheusRule without groups")
		}
		return true, nil
	default:
		return true, fmt.Errorf("kind %q is neither PodMonitor nor PrometheusRule", head.Kind)
	}
}
