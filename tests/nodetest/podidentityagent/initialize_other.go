//go:build !linux

package main

import "errors"

// initialize needs Linux's netlink.
func initialize() error { return errors.New("initialize: Linux only") }
