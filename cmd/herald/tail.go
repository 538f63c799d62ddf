package main

import (
	"context"
	"io"
)

func runTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return usageError{"tail: not built yet"}
}
