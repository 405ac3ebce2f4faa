// Command saltbush runs the saltbush server (`saltbush serve`) and its admin
// CLI (`saltbush admin ...`).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/saltbush/saltbush/errdefs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "saltbush",
		Short:         "EKS-compatible control plane for managed add-ons and access entries",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCommand(), newAdminCommand())
	if err := root.ExecuteContext(ctx); err != nil {
		// A server error names its AWS exception (the ErrorInfo reason),
		// as the AWS CLI does.
		if st, ok := status.FromError(err); ok && st.Code() != codes.OK {
			fmt.Fprintf(os.Stderr, "saltbush: %s: %v\n", errdefs.FromGRPC(st).Exception, err)
		} else {
			fmt.Fprintln(os.Stderr, "saltbush:", err)
		}
		os.Exit(1)
	}
}

// bindEnv lets every flag of cmd be set from SALTBUSH_<FLAG_NAME> (dashes
// become underscores). A flag given on the command line wins.
func bindEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		name := "SALTBUSH_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if serr := cmd.Flags().Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, serr)
			}
		}
	})
	return err
}
