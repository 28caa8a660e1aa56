package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/release"
)

func newManifestCmd() *cobra.Command {
	var bundles, urls []string
	var name, namespace string
	cmd := &cobra.Command{
		Use:   "manifest --bundle B.bundle --url URL [--bundle … --url …] [--namespace NS]",
		Short: "Print the EdgeAgentRelease that publishes signed binaries to a hub (kubectl apply -f -)",
		Long: `Print an EdgeAgentRelease for the bundles, one per architecture, each with the url the hub fetches its
binary from (the hub checks what it fetches against the bundle; the hosts check the bundle's signature).
Every bundle must be of the same fleet-agent version.`,
		Example: `  fleet-release manifest --namespace stores \
    --bundle fleet-agent_linux_amd64.bundle --url https://releases.example.com/v0.9.2/fleet-agent_linux_amd64 \
    --bundle fleet-agent_linux_arm64.bundle --url https://releases.example.com/v0.9.2/fleet-agent_linux_arm64 | kubectl apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(bundles) == 0 || len(bundles) != len(urls) {
				return fmt.Errorf("give one --url per --bundle (got %d bundles and %d urls)", len(bundles), len(urls))
			}
			rel := &infrav1.EdgeAgentRelease{TypeMeta: metav1.TypeMeta{APIVersion: infrav1.GroupVersion.String(), Kind: "EdgeAgentRelease"},
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
			for i, path := range bundles {
				raw, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				b, err := release.ParseBundle(raw)
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				var a release.Artifact
				if err := json.Unmarshal(b.Artifact, &a); err != nil {
					return fmt.Errorf("%s: the artifact: %w", path, err)
				}
				if rel.Spec.Version != "" && a.Version != rel.Spec.Version {
					return fmt.Errorf("%s is fleet-agent %s, %s is %s: one release per manifest", path, a.Version, bundles[0], rel.Spec.Version)
				}
				if !strings.HasPrefix(urls[i], "https://") && !strings.HasPrefix(urls[i], "http://") {
					return fmt.Errorf("--url %q: want an http or https URL", urls[i])
				}
				rel.Spec.Version = a.Version
				rel.Spec.Artifacts = append(rel.Spec.Artifacts, infrav1.AgentArtifact{Arch: a.Arch, URL: urls[i], Bundle: strings.TrimSpace(string(raw))})
			}
			if rel.Name == "" {
				rel.Name = "fleet-agent-" + strings.NewReplacer(".", "-", "+", "-").Replace(strings.ToLower(rel.Spec.Version))
			}
			if errs := validation.IsDNS1123Subdomain(rel.Name); len(errs) > 0 {
				return fmt.Errorf("--name %q: %s", rel.Name, strings.Join(errs, "; "))
			}
			out, err := yaml.Marshal(rel)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&bundles, "bundle", nil, "A bundle from `fleet-release sign` (one per architecture).")
	fs.StringArrayVar(&urls, "url", nil, "Where the hub fetches the binary of the bundle at the same position.")
	fs.StringVar(&name, "name", "", "Name of the EdgeAgentRelease (default fleet-agent-<version>).")
	fs.StringVarP(&namespace, "namespace", "n", "default", "Namespace of the hosts the release is for.")
	return cmd
}
