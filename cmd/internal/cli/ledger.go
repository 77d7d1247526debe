package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/docketq/docket/handlers"
)

func init() {
	subcommands["ledger-transfer"] = subcommand{"post a transfer to the ledger: --from A --to B --amount CENTS [--tx-id ID]", ledgerTransferCommand}
	ctlCommands["ledger"] = subcommand{"the ledger: `ledger balance ACCOUNT`, `ledger verify` (exit 1 naming the accounts whose cache drifted), `ledger cancel TXID`", ctlLedger}
}

var ledgerTransferCommand = argsCommand(func(fs *flag.FlagSet, a *handlers.LedgerTransferArgs) {
	fs.StringVar(&a.From, "from", "", "source account id (required)")
	fs.StringVar(&a.To, "to", "", "destination account id (required)")
	fs.Int64Var(&a.Amount, "amount", 0, "amount in cents, a positive integer (required)")
	fs.StringVar(&a.TxID, "tx-id", "", "the transaction's id: posted at most once, however often enqueued (default: the job's id)")
})

func ctlLedger(*flag.FlagSet) func(*env, []string) error {
	return func(e *env, rest []string) error {
		if len(rest) == 0 {
			return badInput("give a ledger command: balance ACCOUNT, verify, or cancel TXID")
		}
		switch cmd, args := rest[0], rest[1:]; {
		case cmd == "balance" && len(args) == 1:
			bal, err := handlers.LedgerBalance(e.ctx, e.db, args[0])
			if errors.Is(err, handlers.ErrLedgerAccount) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s\t%d\n", shown(args[0]), bal)
			return nil
		case cmd == "verify" && len(args) == 0:
			drift, err := handlers.VerifyLedger(e.ctx, e.db)
			if err != nil {
				return err
			}
			if len(drift) == 0 {
				fmt.Fprintln(e.stdout, "every account's cache matches the log")
				return nil
			}
			names := make([]string, len(drift))
			for i, d := range drift {
				fmt.Fprintln(e.stdout, shown(d.String()))
				names[i] = d.Account
			}
			return fmt.Errorf("%d ledger accounts drifted from the log: %s", len(drift), strings.Join(names, ", "))
		case cmd == "cancel" && len(args) == 1:
			out, err := handlers.CancelLedgerTx(e.ctx, e.db, e.q, args[0])
			if errors.Is(err, handlers.ErrTransactionNotFound) || errors.Is(err, handlers.ErrLedgerNotCancellable) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if out.Cancelled {
				fmt.Fprintf(e.stdout, "%s\tcancelled\n", shown(args[0]))
				return nil
			}
			fmt.Fprintf(e.stdout, "%s\tcompensated by %s (job %s): %s\n", shown(args[0]), shown(out.Compensation), shown(out.JobID), shown(out.Why))
			return nil
		}
		return badInput("unknown ledger command %q: use balance ACCOUNT, verify, or cancel TXID", strings.Join(rest, " "))
	}
}
