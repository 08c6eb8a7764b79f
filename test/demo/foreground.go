package main

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// takeTerminal makes the demo the terminal's foreground process group, so that Ctrl-C interrupts the demo alone
// and not the make that started it: GNU make kills itself with SIGINT once its recipe ends, whatever the recipe
// returns, and the shell would report `make demo` as failed although the demo ended as documented. The returned
// function gives the terminal back to the group the demo was started in. Without a terminal (a pipe, CI) it does
// nothing.
func takeTerminal() (restore func()) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return func() {}
	}
	fd := int(tty.Fd())
	previous, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || previous != unix.Getpgrp() {
		// Not started in the foreground: leave the terminal alone.
		_ = tty.Close()
		return func() {}
	}
	// A background group that sets the terminal's group gets SIGTTOU: ignore it while switching.
	signal.Ignore(unix.SIGTTOU)
	if unix.Setpgid(0, 0) != nil || unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, unix.Getpgrp()) != nil {
		signal.Reset(unix.SIGTTOU)
		_ = tty.Close()
		return func() {}
	}
	return func() {
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, previous)
		signal.Reset(unix.SIGTTOU)
		_ = tty.Close()
	}
}
