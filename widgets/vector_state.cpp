// VZEROUPPER before work on threads that Qt's painting left dirty (see the header).
#include "fp4lab/widgets/vector_state.h"

#include <QCoreApplication>
#include <QEvent>
#include <QObject>
#include <QPointer>

namespace fp4lab::widgets {

namespace {

bool hasAvx() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool avx = __builtin_cpu_supports("avx");
  return avx;
#else
  return false;
#endif
}

class VectorStateGuard : public QObject {
 public:
  using QObject::QObject;
  bool eventFilter(QObject*, QEvent*) override {
    clearUpperVectorState();
    return false;
  }
};

}  // namespace

void clearUpperVectorState() {
#if defined(__x86_64__) || defined(__i386__)
  if (hasAvx()) asm volatile("vzeroupper" ::: "memory");
#endif
}

void guardVectorState() {
  static QPointer<VectorStateGuard> installed;  // gone with its application
  QCoreApplication* app = QCoreApplication::instance();
  if (!app || !hasAvx() || installed) return;
  installed = new VectorStateGuard(app);
  app->installEventFilter(installed);
}

}  // namespace fp4lab::widgets
