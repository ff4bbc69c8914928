package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// masterSubcommands are the admin commands `shardfence master` runs
// against a running master (runMasterAdmin), in the order -h lists them.
var masterSubcommands = []struct{ name, summary string }{
	{"status", "every master's role, term, primary and readiness"},
	{"promote", "promote the standby at --addr to primary by hand"},
	{"snapshot", "take a complete snapshot of the primary's state now"},
	{"nodes", "the sidecar nodes that joined, with their liveness and shards"},
	{"shards", "the shard assignment table: each shard's node, term and state"},
	{"watch", "follow the routing feed: where each shard is served, as it changes"},
	{"assign", "assign a shard to a node (or let the master pick one)"},
	{"unassign", "unassign a shard: its owner closes it"},
	{"move", "move one shard to the node named (same-term handoff, as a drain's)"},
	{"rebalance", "spread the shards evenly over the active nodes by moves (--dry-run: plan only)"},
	{"drain", "move every shard off a node and place nothing new there"},
	{"undrain", "let a drained node take shards again"},
}

// isMasterSubcommand reports whether name is an admin command of master.
func isMasterSubcommand(name string) bool {
	for _, s := range masterSubcommands {
		if s.name == name {
			return true
		}
	}
	return false
}

// masterSubcommandNames is the list for error messages.
func masterSubcommandNames() string {
	names := make([]string, len(masterSubcommands))
	for i, s := range masterSubcommands {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

// masterUsage is `shardfence master -h`: how to run the master, its
// subcommands, then its flags.
func masterUsage(fs *flag.FlagSet) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: shardfence master [flags]                run a master (primary or standby)")
		fmt.Fprintln(w, "       shardfence master SUBCOMMAND [flags]     administer a running one (--addr: every master of the cluster)")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Subcommands (run 'shardfence master SUBCOMMAND -h' for their flags):")
		printMasterSubcommands(w)
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Flags of the master itself:")
		fs.PrintDefaults()
	}
}

func printMasterSubcommands(w io.Writer) {
	for _, s := range masterSubcommands {
		fmt.Fprintf(w, "  %-10s %s\n", s.name, s.summary)
	}
}

// unknownMasterSubcommand is the error for `shardfence master foo`.
func unknownMasterSubcommand(name string) error {
	return fmt.Errorf("%w: unknown master subcommand %q: the subcommands are %s (flags of the master itself start with -; see 'shardfence master -h')", errUsage, clipArg(name), masterSubcommandNames())
}
