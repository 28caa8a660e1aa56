// Command fleet-release makes and checks signed fleet-agent releases:
// the offline root keys, the release-signing keys they certify, and the
// bundle that goes with each binary (docs/AGENT-RELEASES.md).
package main

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgefleet/fleet/pkg/release"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "fleet-release",
		Short:         "Make and check signed fleet-agent releases",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newKeygenCmd(), newCertifyCmd(), newSignCmd(), newVerifyCmd(), newManifestCmd())
	return root
}

func newKeygenCmd() *cobra.Command {
	var out, comment string
	cmd := &cobra.Command{
		Use:   "keygen --out NAME",
		Short: "Make an Ed25519 key: NAME.key (private, 0600) and NAME.pub (a roots-file line)",
		Example: `  fleet-release keygen --out root-2026 --comment "offline root 2026"   # keep root-2026.key offline
  fleet-release keygen --out signing-2026`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if out == "" {
				return fmt.Errorf("--out is required")
			}
			pub, key, err := release.GenerateKey()
			if err != nil {
				return err
			}
			pem, err := release.MarshalPrivateKey(key)
			if err != nil {
				return err
			}
			if err := writeNew(out+".key", pem, 0o600); err != nil {
				return err
			}
			if err := writeNew(out+".pub", []byte(release.RootLine(pub, comment)+"\n"), 0o644); err != nil {
				return err
			}
			fmt.Printf("key %s: %s.key (private), %s.pub\n", release.KeyID(pub), out, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "Path prefix of the two files (required); neither may exist.")
	cmd.Flags().StringVar(&comment, "comment", "", "A comment on the public key's line.")
	return cmd
}

func newCertifyCmd() *cobra.Command {
	var rootKey, pubFile, out, comment string
	var validFor time.Duration
	cmd := &cobra.Command{
		Use:     "certify --root-key ROOT.key --public-key SIGNING.pub --out SIGNING.cert",
		Short:   "Certify a release-signing key with a root key, for a limited time",
		Example: `  fleet-release certify --root-key root-2026.key --public-key signing-2026.pub --valid-for 8760h --out signing-2026.cert`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			root, err := release.LoadPrivateKey(rootKey)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(pubFile)
			if err != nil {
				return err
			}
			keys, err := release.ParseRoots(b)
			if err != nil || len(keys) != 1 {
				return fmt.Errorf("%s: want one public key line from `fleet-release keygen` (%v)", pubFile, err)
			}
			if validFor <= 0 {
				return fmt.Errorf("--valid-for %s: want a positive duration", validFor)
			}
			now := time.Now()
			cert, err := release.Certify(root, keys[0], now, now.Add(validFor), comment)
			if err != nil {
				return err
			}
			if err := writeJSON(out, cert); err != nil {
				return err
			}
			fmt.Printf("signing key %s certified by root %s until %s: %s\n", release.KeyID(keys[0]),
				release.KeyID(root.Public().(ed25519.PublicKey)), now.Add(validFor).UTC().Format(time.RFC3339), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&rootKey, "root-key", "", "The root's private key (required).")
	cmd.Flags().StringVar(&pubFile, "public-key", "", "The signing key's .pub file (required).")
	cmd.Flags().StringVar(&out, "out", "", "Where to write the certificate (required).")
	cmd.Flags().StringVar(&comment, "comment", "", "A comment in the certificate.")
	cmd.Flags().DurationVar(&validFor, "valid-for", 365*24*time.Hour, "How long the signing key is valid from now.")
	return cmd
}

func newSignCmd() *cobra.Command {
	var key, certFile, binary, version, minVersion, goos, goarch, out string
	cmd := &cobra.Command{
		Use:   "sign --key SIGNING.key --cert SIGNING.cert --binary fleet-agent --version vX.Y.Z --out fleet-agent.bundle",
		Short: "Sign a fleet-agent binary: write its bundle",
		Example: `  fleet-release sign --key signing-2026.key --cert signing-2026.cert \
    --binary dist/fleet-agent_linux_arm64 --version v0.5.0 --os linux --arch arm64 --min-version v0.4.2 \
    --out dist/fleet-agent_linux_arm64.bundle`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			k, err := release.LoadPrivateKey(key)
			if err != nil {
				return err
			}
			var cert release.SignedKey
			if err := readJSON(certFile, &cert); err != nil {
				return err
			}
			f, err := os.Open(binary)
			if err != nil {
				return err
			}
			defer f.Close()
			sum, size, err := release.Digest(f)
			if err != nil {
				return fmt.Errorf("reading %s: %w", binary, err)
			}
			b, err := release.Sign(k, &cert, release.Artifact{Name: release.AgentName, Version: version, OS: goos, Arch: goarch,
				SHA256: sum, Size: size, MinVersion: minVersion, Created: time.Now().UTC()})
			if err != nil {
				return err
			}
			if err := writeJSON(out, b); err != nil {
				return err
			}
			fmt.Printf("%s %s %s/%s (%d bytes, sha256 %s) signed: %s\n", release.AgentName, version, goos, goarch, size, sum, out)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&key, "key", "", "The signing key (required).")
	fs.StringVar(&certFile, "cert", "", "Its certificate from `fleet-release certify` (required).")
	fs.StringVar(&binary, "binary", "", "The fleet-agent binary (required).")
	fs.StringVar(&version, "version", "", "Its version, vMAJOR.MINOR.PATCH (required).")
	fs.StringVar(&minVersion, "min-version", "", "The lowest version agents may run once they have seen this release (a release with known flaws below it).")
	fs.StringVar(&goos, "os", runtime.GOOS, "The OS the binary is for.")
	fs.StringVar(&goarch, "arch", runtime.GOARCH, "The architecture the binary is for.")
	fs.StringVar(&out, "out", "", "Where to write the bundle (required).")
	return cmd
}

func newVerifyCmd() *cobra.Command {
	var roots, bundle, binary, goos, goarch, floor string
	cmd := &cobra.Command{
		Use:     "verify --roots ROOTS --bundle fleet-agent.bundle --binary fleet-agent",
		Short:   "Check a binary and its bundle as an agent would",
		Example: `  fleet-release verify --roots /usr/share/fleet-agent/release-roots --bundle fleet-agent.bundle --binary fleet-agent`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			r, err := release.LoadRoots(roots)
			if err != nil {
				return err
			}
			raw, err := os.ReadFile(bundle)
			if err != nil {
				return err
			}
			b, err := release.ParseBundle(raw)
			if err != nil {
				return err
			}
			a, err := release.VerifyBundle(b, release.Policy{Roots: r, OS: goos, Arch: goarch, Floor: floor, Now: time.Now()})
			if err != nil {
				return err
			}
			f, err := os.Open(binary)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := release.VerifyBinary(a, f); err != nil {
				return err
			}
			fmt.Printf("%s %s %s/%s: verified\n", a.Name, a.Version, a.OS, a.Arch)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&roots, "roots", release.RootsFile, "The root keys to trust.")
	fs.StringVar(&bundle, "bundle", "", "The bundle (required).")
	fs.StringVar(&binary, "binary", "", "The binary (required).")
	fs.StringVar(&goos, "os", runtime.GOOS, "The OS of the host it is for.")
	fs.StringVar(&goarch, "arch", runtime.GOARCH, "The architecture of the host it is for.")
	fs.StringVar(&floor, "floor", "", "The lowest version the host may run.")
	return cmd
}

// writeNew writes a file that must not exist yet: a key is never
// overwritten.
func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeJSON(path string, v any) error {
	if path == "" {
		return fmt.Errorf("--out is required")
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
