package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	"github.com/edgefleet/fleet/pkg/contract/hostaccess"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// LogsOptions is `kubectl fleet host logs`.
type LogsOptions struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Name       string
	Bootstrap  bool
	Reset      bool
	Follow     bool
	Since      time.Duration
	Tail       int64
	LimitBytes int64

	conn *kube.Connection
}

// Complete takes the host name and builds the client.
func (o *LogsOptions) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the flags go together.
func (o *LogsOptions) Validate() error {
	switch {
	case o.Bootstrap && o.Reset:
		return errors.New("--bootstrap and --reset name two logs: pick one")
	case (o.Bootstrap || o.Reset) && (o.Follow || o.Since != 0):
		return errors.New("--follow and --since apply to the agent's own log only: the bootstrap and reset logs are complete once written")
	case o.Since < 0:
		return fmt.Errorf("--since %s: want a positive duration", o.Since)
	case o.Tail < -1:
		return fmt.Errorf("--tail %d: want -1 (all lines) or more", o.Tail)
	case o.LimitBytes < 0 || o.LimitBytes > wire.MaxLogBytes:
		return fmt.Errorf("--limit-bytes %d: want 0 (the most the hub sends, %d) up to %d", o.LimitBytes, wire.MaxLogBytes, wire.MaxLogBytes)
	}
	return validate.HostName(o.Name)
}

func (o *LogsOptions) source() wire.LogSource {
	switch {
	case o.Bootstrap:
		return wire.LogBootstrap
	case o.Reset:
		return wire.LogReset
	}
	return wire.LogAgent
}

// Run streams the log to Out until it ends or, with --follow, until ctx
// ends.
func (o *LogsOptions) Run(ctx context.Context) error {
	req := o.conn.REST.Get().AbsPath(hostaccess.Path(o.conn.Namespace, o.Name, hostaccess.SubresourceLog)).
		Param(hostaccess.ParamSource, string(o.source()))
	if o.Follow {
		req = req.Param(hostaccess.ParamFollow, "true")
	}
	if o.Since > 0 {
		req = req.Param(hostaccess.ParamSinceSeconds, strconv.FormatInt(int64((o.Since+time.Second-1)/time.Second), 10))
	}
	if o.Tail >= 0 {
		req = req.Param(hostaccess.ParamTailLines, strconv.FormatInt(o.Tail, 10))
	}
	if o.LimitBytes > 0 {
		req = req.Param(hostaccess.ParamLimitBytes, strconv.FormatInt(o.LimitBytes, 10))
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return explainAccess(o.conn, o.Name, "logs", err)
	}
	defer body.Close()
	if _, err := io.Copy(o.Out, body); err != nil && ctx.Err() == nil {
		return fmt.Errorf("reading the log of edgehost/%s: %w", o.Name, err)
	}
	return nil
}

// explainAccess turns the host-access API's failures into advice.
func explainAccess(conn *kube.Connection, name, what string, err error) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return fmt.Errorf("reading the %s of edgehost/%s: %w", what, name, err)
	}
	s := status.Status()
	switch {
	case apierrors.IsNotFound(err) && s.Details != nil && s.Details.Kind == "" && s.Message == "the server could not find the requested resource":
		return fmt.Errorf("the hub's host-access API is not registered in the cluster of context %q (APIService %s): "+
			"is fleet-hub running with --host-access-bind-address (docs/OPERATING.md)?", conn.Context, hostaccess.APIServiceName)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s\n(to read hosts' logs and facts, bind the ClusterRole fleet-host-access, which grants get on "+
			"edgehosts/log and edgehosts/facts in API group %s)", s.Message, hostaccess.Group)
	case apierrors.IsServiceUnavailable(err) && s.Message == "service unavailable":
		return fmt.Errorf("the hub's host-access API (APIService %s) does not answer the API server: is fleet-hub running? "+
			"`kubectl get apiservice %s` says why", hostaccess.APIServiceName, hostaccess.APIServiceName)
	}
	return fmt.Errorf("edgehost/%s %s: %s", name, what, s.Message)
}

// accessRequest is the GET of a host's subresource, for tests.
func accessRequest(conn *kube.Connection, name, sub string) *rest.Request {
	return conn.REST.Get().AbsPath(hostaccess.Path(conn.Namespace, name, sub))
}
