#pragma once
// Warnings: conditions that are legal but probably not what the user meant (an Adam eps that
// vanishes in fp32, a scheduler stepped past its end). Each distinct message is reported once
// per process; the handler decides where it goes (stderr by default, a capture in tests).
#include <functional>
#include <string>

namespace precis {

using WarningHandler = std::function<void(const std::string& message)>;

/// Reports `message` through the current handler, once per distinct message (thread-safe).
/// The default handler prints "precis warning: <message>" to stderr.
void warn(const std::string& message);

/// Replaces the handler (an empty function restores the default) and returns the previous one.
/// Setting a handler also forgets which messages were already reported, so a test sees its
/// warning even if an earlier test triggered the same message.
WarningHandler set_warning_handler(WarningHandler handler);

}  // namespace precis
