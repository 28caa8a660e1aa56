package kube

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
)

// PrintFlags are kubectl get's -o and template flags, printing with
// cli-runtime's printers (json, yaml, name, jsonpath…, go-template…).
type PrintFlags struct {
	OutputFormat      *string
	Template          string
	AllowMissingKeys  bool
	ShowManagedFields bool

	scheme        *runtime.Scheme
	outputChanged func() bool
}

// NewPrintFlags returns kubectl's defaults; objects printed get their kind
// from scheme, as a typed client leaves it unset.
func NewPrintFlags(scheme *runtime.Scheme) *PrintFlags {
	out := ""
	return &PrintFlags{OutputFormat: &out, AllowMissingKeys: true, scheme: scheme}
}

var (
	jsonPathFormats = []string{"jsonpath", "jsonpath-as-json", "jsonpath-file"}
	templateFormats = []string{"go-template", "go-template-file", "template", "templatefile"}
)

// AllowedFormats are the -o values ToPrinter takes.
func (f *PrintFlags) AllowedFormats() []string {
	return append(append([]string{"json", "yaml", "name"}, templateFormats...), jsonPathFormats...)
}

// AddFlags binds the flags to cmd.
func (f *PrintFlags) AddFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVarP(f.OutputFormat, "output", "o", *f.OutputFormat, fmt.Sprintf("Output format. One of: (%s).", strings.Join(f.AllowedFormats(), ", ")))
	f.outputChanged = func() bool { return fs.Changed("output") }
	fs.StringVar(&f.Template, "template", "", "Template string or path to template file to use when -o=go-template, -o=go-template-file. The template format is golang templates [http://golang.org/pkg/text/template/#pkg-overview].")
	fs.BoolVar(&f.AllowMissingKeys, "allow-missing-template-keys", true, "If true, ignore any errors in templates when a field or map key is missing in the template. Only applies to golang and jsonpath output formats.")
	fs.BoolVar(&f.ShowManagedFields, "show-managed-fields", false, "If true, keep the managedFields when printing objects in JSON or YAML format.")
}

// ToPrinter is the printer -o asks for, with kubectl's errors.
func (f *PrintFlags) ToPrinter() (printers.ResourcePrinter, error) {
	format := *f.OutputFormat
	// As kubectl: --template alone means -o go-template.
	if f.Template != "" && (f.outputChanged == nil || !f.outputChanged()) {
		format = "go-template"
	}
	p, err := f.printer(format)
	if err != nil {
		return nil, err
	}
	return printers.NewTypeSetter(f.scheme).ToPrinter(p), nil
}

func (f *PrintFlags) printer(format string) (printers.ResourcePrinter, error) {
	switch format {
	case "json", "yaml":
		var p printers.ResourcePrinter = &printers.JSONPrinter{}
		if format == "yaml" {
			p = &printers.YAMLPrinter{}
		}
		if !f.ShowManagedFields {
			p = &printers.OmitManagedFieldsPrinter{Delegate: p}
		}
		return p, nil
	case "name":
		return &printers.NamePrinter{}, nil
	}
	name, arg, _ := strings.Cut(format, "=")
	if f.Template != "" {
		arg = f.Template
	}
	isJSONPath, isTemplate := slices.Contains(jsonPathFormats, name), slices.Contains(templateFormats, name)
	if !isJSONPath && !isTemplate {
		return nil, fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: %s", format, strings.Join(f.AllowedFormats(), ","))
	}
	if arg == "" {
		return nil, fmt.Errorf("template format specified but no template given")
	}
	if strings.HasSuffix(name, "file") {
		data, err := os.ReadFile(arg)
		if err != nil {
			return nil, fmt.Errorf("error reading --template %s, %w", arg, err)
		}
		arg = string(data)
	}
	if isTemplate {
		p, err := printers.NewGoTemplatePrinter([]byte(arg))
		if err != nil {
			return nil, fmt.Errorf("error parsing template %s, %w", arg, err)
		}
		p.AllowMissingKeys(f.AllowMissingKeys)
		return p, nil
	}
	p, err := printers.NewJSONPathPrinter(arg)
	if err != nil {
		return nil, fmt.Errorf("error parsing jsonpath %s, %w", arg, err)
	}
	p.AllowMissingKeys(f.AllowMissingKeys)
	p.EnableJSONOutput(name == "jsonpath-as-json")
	return p, nil
}
