#pragma once
// A command that an ibemu subcommand runs and waits for (`ibemu capture --
// COMMAND`), with the exit status a shell would report for it.
#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace ibemu {

/// Starts `argv` with this process's environment and the signals of
/// `unblock` unblocked again (the caller blocks them to wait for them); the
/// child's pid, or -1 with errno. A program that cannot be executed makes
/// the child say why and exit with 127, as a shell does.
pid_t spawn_child(const std::vector<std::string>& argv, const sigset_t& unblock);

/// The child's exit status as a shell reports it: its exit code, or 128 plus
/// the signal that killed it.
int shell_exit_status(int wait_status);

}  // namespace ibemu
