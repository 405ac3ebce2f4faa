// Command saltbush runs the saltbush server (`saltbush serve`) and its admin
// CLI (`saltbush admin ...`).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/release"
)

// The exit codes (docs/operators.md, "The admin CLI").
const (
	exitOK = 0
	// exitError: the command ran and failed (the server refused it, a file
	// could not be read, a report was not accepted).
	exitError = 1
	// exitUsage: the command line is wrong (an unknown command or flag, a
	// missing argument, a value outside the fixed ones); usage is shown.
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args with stdout and stderr and returns the
// exit code. Tests run it in process as main does.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	return reportError(stderr, cmd, err)
}

func newRootCommand() *cobra.Command {
	root := group(&cobra.Command{
		Use:   "saltbush",
		Short: "EKS-compatible control plane for managed add-ons and access entries",
		// Errors are printed by reportError, once and on one line; cobra
		// would print them and the usage to standard output.
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			argsChecked(cmd)
			return nil
		},
	})
	// cobra adds `completion bash|zsh|fish|powershell` when it executes
	// (docs/operators.md has the install lines), writing to SetOut's writer.
	root.AddCommand(newServeCommand(), newAdminCommand(), &cobra.Command{
		Use: "version", Short: "Print this binary's release: module version, commit, contract baseline", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), release.Current())
			return err
		},
	})
	return root
}

// argsChecked marks that cmd's flags and arguments were accepted: an error
// from now on is the command's, not the command line's, and comes without
// the usage. Every PersistentPreRunE calls it last (cobra runs only the
// nearest one).
func argsChecked(cmd *cobra.Command) {
	cmd.SilenceUsage = true
}

// reportError prints err on one line and returns the exit code. A server
// error is printed as the AWS CLI names it, "ResourceNotFoundException: No
// cluster found for name: x.", decoded from the gRPC status as the façade
// decodes it (errdefs.FromGRPC: the ErrorInfo reason, or the code's
// exception). An error of the command line is followed by cmd's usage.
func reportError(w io.Writer, cmd *cobra.Command, err error) int {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		if st := se.GRPCStatus(); st.Code() != codes.OK {
			e := errdefs.FromGRPC(st)
			_, _ = fmt.Fprintf(w, "%s: %s\n", e.Exception, oneLine(e.Message))
			return exitError
		}
	}
	_, _ = fmt.Fprintf(w, "saltbush: %s\n", oneLine(err.Error()))
	// The root command is never past its checks (it only holds commands):
	// its error is always an unknown command or flag.
	if cmd != nil && (!cmd.SilenceUsage || !cmd.HasParent()) {
		_, _ = fmt.Fprint(w, cmd.UsageString())
		return exitUsage
	}
	return exitError
}

// oneLine keeps a message on one line, so that stderr has one line per
// error for a log or a script.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// group finishes a command that only holds subcommands. Alone it shows its
// help; with an unknown subcommand it fails with a usage error (cobra would
// show the help and exit 0, and `admin clsuter get` would look like it
// worked).
func group(cmd *cobra.Command) *cobra.Command {
	// cobra's own default, which only its root-command check applies.
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf("; did you mean %q?", s[0])
		}
		return errors.New(msg)
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	return cmd
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
