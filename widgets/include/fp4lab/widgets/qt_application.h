// The QApplication of processes that are not the GUI (fp4lab experiment, tests): created on first
// use, on a platform that needs no display when there is none.
#pragma once

#include <string>

namespace fp4lab::widgets {

enum class QtPlatform {
  // Qt's default platform when a display is there (DISPLAY or WAYLAND_DISPLAY set) or
  // QT_QPA_PLATFORM names one; `offscreen` otherwise.
  Auto,
  // `offscreen` unless QT_QPA_PLATFORM names a platform: for work that never shows a window
  // (rendering files), so that a stale DISPLAY (an ssh session without X forwarding) cannot make
  // Qt abort the process.
  Offscreen,
};

// Makes sure a QApplication exists. The first call in a process without one creates it and keeps
// it for the life of the process (Qt does not support creating a second one after deleting the
// first). Call from the main thread. Throws fp4lab::Error when the process already has a
// QCoreApplication that is not a QApplication (charts need widgets).
void ensureApplication(QtPlatform platform = QtPlatform::Auto);

// The platform the process's Qt application runs on ("offscreen", "xcb", "wayland", ...), or ""
// when there is none yet.
std::string qtPlatformName();

}  // namespace fp4lab::widgets
