#include "widgets/vtk_gl_widget.hpp"

#include <QGuiApplication>
#include <QHBoxLayout>
#include <QOpenGLWindow>
#include <QPainter>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QOpenGLContext>
#include <QTimer>
#include <QWheelEvent>
#include <QtGui/qopengl.h>

#include <vtkCallbackCommand.h>
#include <vtkGenericOpenGLRenderWindow.h>
#include <vtkGenericRenderWindowInteractor.h>
#include <vtkInteractorStyleTrackballCamera.h>
#include <vtkNew.h>
#include <vtkOpenGLState.h>
#include <vtkRenderer.h>
#include <vtkRendererCollection.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace tessera::ui {

namespace {

// X11 keysym names, which VTK's interactor styles compare against.
const char* keySymOf(int key) {
    switch (key) {
        case Qt::Key_Left: return "Left";
        case Qt::Key_Right: return "Right";
        case Qt::Key_Up: return "Up";
        case Qt::Key_Down: return "Down";
        case Qt::Key_PageUp: return "Prior";
        case Qt::Key_PageDown: return "Next";
        case Qt::Key_Home: return "Home";
        case Qt::Key_End: return "End";
        case Qt::Key_Return: return "Return";
        case Qt::Key_Enter: return "KP_Enter";
        case Qt::Key_Escape: return "Escape";
        case Qt::Key_Space: return "space";
        case Qt::Key_Tab: return "Tab";
        case Qt::Key_Backspace: return "BackSpace";
        case Qt::Key_Delete: return "Delete";
        case Qt::Key_Plus: return "plus";
        case Qt::Key_Minus: return "minus";
        case Qt::Key_Shift: return "Shift_L";
        case Qt::Key_Control: return "Control_L";
        case Qt::Key_Alt: return "Alt_L";
        default: return nullptr;
    }
}

}  // namespace

// The native window: VTK's render window and interactor, the render scales, Qt's input for VTK.
class VtkGLWindow : public QOpenGLWindow {
public:
    VtkGLWindow();
    ~VtkGLWindow() override;

    vtkGenericOpenGLRenderWindow* renderWindow() const { return m_window; }
    vtkGenericRenderWindowInteractor* interactor() const { return m_interactor; }
    void addRenderer(vtkRenderer* renderer);
    void removeRenderer(vtkRenderer* renderer);
    void setFrameBudgets(double still_seconds, double interactive_seconds);
    double stillRenderScale() const { return m_still_scale; }
    double interactiveRenderScale() const { return m_interactive_scale; }
    bool isInteracting() const;
    void requestRender();
    void requestQuickRender();
    // Renders a frame now and reads it back (QOpenGLWindow::grabFramebuffer alone reads whatever the
    // buffer holds, which after a swap may be an old frame).
    QImage renderAndGrab();

protected:
    void initializeGL() override;
    void resizeGL(int width, int height) override;
    void paintGL() override;

    void mousePressEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void wheelEvent(QWheelEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;
    void keyReleaseEvent(QKeyEvent* event) override;
    bool event(QEvent* event) override;

private:
    static void onRenderWindowEvent(vtkObject* caller, unsigned long event, void* client_data, void* call_data);
    void handleRenderWindowEvent(unsigned long event, void* call_data);
    void releaseGraphicsResources();
    void setEventPosition(const QPointF& position, Qt::KeyboardModifiers modifiers, int repeat = 0);
    bool forwardKey(QKeyEvent* event, unsigned long vtk_event);
    QSize deviceSize() const;
    // Resizes VTK's window to the window's device size × scale (event positions follow).
    void applyRenderScale(double scale);

    vtkSmartPointer<vtkGenericOpenGLRenderWindow> m_window;
    vtkSmartPointer<vtkGenericRenderWindowInteractor> m_interactor;
    vtkSmartPointer<vtkCallbackCommand> m_window_observer;
    vtkSmartPointer<vtkCallbackCommand> m_render_request_observer;
    QTimer* m_still_timer = nullptr;  // ends a run of quick renders with a still one
    double m_still_budget = 0.5;        // seconds
    double m_interactive_budget = 0.1;  // seconds
    double m_still_scale = 1.0;         // render scales, adapted to the budgets
    double m_interactive_scale = 0.5;
    double m_render_scale = 1.0;        // of VTK's window now: device pixels × this
    Qt::MouseButtons m_buttons;         // held in this window
    bool m_in_paint = false;
    double m_wheel_remainder = 0.0;  // angle delta not yet sent as wheel steps
};

QSurfaceFormat VtkGLWidget::defaultFormat() {
    QSurfaceFormat format;
    format.setRenderableType(QSurfaceFormat::OpenGL);
    format.setVersion(3, 2);
    format.setProfile(QSurfaceFormat::CoreProfile);
    format.setDepthBufferSize(24);
    format.setStencilBufferSize(8);
    format.setAlphaBufferSize(8);
    format.setSamples(0);  // VTK renders into its own framebuffer; Qt's needs no multisampling
    format.setSwapBehavior(QSurfaceFormat::DoubleBuffer);
    return format;
}

VtkGLWindow::VtkGLWindow()
    : QOpenGLWindow(QOpenGLWindow::NoPartialUpdate),
      m_window(vtkSmartPointer<vtkGenericOpenGLRenderWindow>::New()),
      m_interactor(vtkSmartPointer<vtkGenericRenderWindowInteractor>::New()),
      m_window_observer(vtkSmartPointer<vtkCallbackCommand>::New()),
      m_render_request_observer(vtkSmartPointer<vtkCallbackCommand>::New()) {
    m_still_timer = new QTimer(this);
    m_still_timer->setSingleShot(true);
    m_still_timer->setInterval(300);  // ms without changes before the full-quality frame
    connect(m_still_timer, &QTimer::timeout, this, [this] { update(); });

    // VTK may only draw once Qt has a context (initializeGL); it renders into its own framebuffer and
    // we blit (NoBlit); Qt owns the context.
    m_window->SetReadyForRendering(false);
    m_window->SetFrameBlitModeToNoBlit();
    m_window->SetMultiSamples(0);
    m_window->SetOwnContext(0);
    m_window->SetIsDirect(1);
    m_window->SetSupportsOpenGL(1);
    m_window->SetAlphaBitPlanes(1);  // depth peeling needs destination alpha

    m_window_observer->SetClientData(this);
    m_window_observer->SetCallback(&VtkGLWindow::onRenderWindowEvent);
    m_window->AddObserver(vtkCommand::WindowMakeCurrentEvent, m_window_observer);
    m_window->AddObserver(vtkCommand::WindowIsCurrentEvent, m_window_observer);
    m_window->AddObserver(vtkCommand::WindowFrameEvent, m_window_observer);

    // The interactor never renders by itself: it asks Qt for a repaint and paintGL renders.
    m_interactor->SetRenderWindow(m_window);
    m_interactor->EnableRenderOff();
    vtkNew<vtkInteractorStyleTrackballCamera> style;
    m_interactor->SetInteractorStyle(style);
    m_render_request_observer->SetClientData(this);
    m_render_request_observer->SetCallback(&VtkGLWindow::onRenderWindowEvent);
    m_interactor->AddObserver(vtkCommand::RenderEvent, m_render_request_observer);
    // Without an observer, the styles' 'q'/'e' keys would try to terminate the application.
    m_interactor->AddObserver(vtkCommand::ExitEvent, m_render_request_observer);
    m_interactor->Initialize();
}

VtkGLWindow::~VtkGLWindow() {
    // Release while this object is whole: the context's aboutToBeDestroyed fires in ~QOpenGLWindow.
    if (context()) disconnect(context(), nullptr, this, nullptr);
    releaseGraphicsResources();
    m_window->RemoveObserver(m_window_observer);
    m_interactor->RemoveObserver(m_render_request_observer);
}

void VtkGLWindow::addRenderer(vtkRenderer* renderer) {
    if (!renderer) return;
    if (m_window->GetNumberOfLayers() <= renderer->GetLayer()) m_window->SetNumberOfLayers(renderer->GetLayer() + 1);
    m_window->AddRenderer(renderer);
    requestRender();
}

void VtkGLWindow::removeRenderer(vtkRenderer* renderer) {
    m_window->RemoveRenderer(renderer);
    requestRender();
}

void VtkGLWindow::requestRender() { update(); }

QImage VtkGLWindow::renderAndGrab() {
    if (!isValid()) return {};
    makeCurrent();
    paintGL();
    return grabFramebuffer();
}

void VtkGLWindow::requestQuickRender() {
    m_still_timer->start();
    update();
}

void VtkGLWindow::setFrameBudgets(double still_seconds, double interactive_seconds) {
    m_still_budget = std::max(still_seconds, 0.001);
    m_interactive_budget = std::max(interactive_seconds, 0.001);
}

bool VtkGLWindow::isInteracting() const {
    return m_buttons != Qt::NoButton || m_still_timer->isActive();
}

QSize VtkGLWindow::deviceSize() const {
    const double ratio = devicePixelRatio();
    return {std::max(1, static_cast<int>(std::lround(width() * ratio))),
            std::max(1, static_cast<int>(std::lround(height() * ratio)))};
}

void VtkGLWindow::applyRenderScale(double scale) {
    const QSize device = deviceSize();
    const int target_width = std::max(1, static_cast<int>(std::lround(device.width() * scale)));
    const int target_height = std::max(1, static_cast<int>(std::lround(device.height() * scale)));
    const int* current = m_window->GetSize();
    if (scale == m_render_scale && current[0] == target_width && current[1] == target_height) return;
    // Keep the interactor's last positions in the new pixel grid, or a drag would jump.
    const double ratio = scale / m_render_scale;
    const int* position = m_interactor->GetEventPosition();
    const int* last = m_interactor->GetLastEventPosition();
    const int moved[4] = {static_cast<int>(std::lround(position[0] * ratio)),
                          static_cast<int>(std::lround(position[1] * ratio)),
                          static_cast<int>(std::lround(last[0] * ratio)), static_cast<int>(std::lround(last[1] * ratio))};
    m_interactor->SetEventPosition(moved[0], moved[1]);
    m_interactor->SetLastEventPosition(moved[2], moved[3]);
    m_render_scale = scale;
    m_window->SetSize(target_width, target_height);
    m_interactor->UpdateSize(target_width, target_height);
}

void VtkGLWindow::onRenderWindowEvent(vtkObject*, unsigned long event, void* client_data, void* call_data) {
    static_cast<VtkGLWindow*>(client_data)->handleRenderWindowEvent(event, call_data);
}

void VtkGLWindow::handleRenderWindowEvent(unsigned long event, void* call_data) {
    switch (event) {
        case vtkCommand::WindowMakeCurrentEvent:
            // Not QOpenGLWindow::makeCurrent(): that rebinds Qt's framebuffer behind VTK's back
            // (black view, "FBO incomplete: no attachments").
            if (context() && QOpenGLContext::currentContext() != context()) {
                context()->makeCurrent(context()->surface());
            }
            break;
        case vtkCommand::WindowIsCurrentEvent:
            *static_cast<bool*>(call_data) = context() != nullptr && QOpenGLContext::currentContext() == context();
            break;
        case vtkCommand::WindowFrameEvent:
            // A render outside paintGL (someone called Render()): show it.
            if (!m_in_paint) update();
            break;
        case vtkCommand::RenderEvent:
            update();
            break;
        default:
            break;
    }
}

void VtkGLWindow::initializeGL() {
    connect(context(), &QOpenGLContext::aboutToBeDestroyed, this, &VtkGLWindow::releaseGraphicsResources,
            Qt::UniqueConnection);
    m_window->SetReadyForRendering(true);
    m_window->OpenGLInitContext();
}

void VtkGLWindow::releaseGraphicsResources() {
    if (!context() || !m_window->GetReadyForRendering()) return;
    makeCurrent();
    m_window->ReleaseGraphicsResources(m_window);
    m_window->SetReadyForRendering(false);
    doneCurrent();
}

void VtkGLWindow::resizeGL(int, int) { applyRenderScale(m_render_scale); }

void VtkGLWindow::paintGL() {
    if (!m_window->GetReadyForRendering()) return;
    const bool interactive = isInteracting();
    applyRenderScale(interactive ? m_interactive_scale : m_still_scale);
    const QSize device = deviceSize();
    const int* rendered = m_window->GetSize();
    const auto start = std::chrono::steady_clock::now();

    m_in_paint = true;
    m_window->Render();
    m_in_paint = false;

    // Rendering may have made another context current (another VTK view); blit into ours.
    makeCurrent();
    vtkOpenGLState* state = m_window->GetState();
    state->PushDrawFramebufferBinding();
    state->vtkglBindFramebuffer(GL_DRAW_FRAMEBUFFER, defaultFramebufferObject());
    state->vtkglViewport(0, 0, device.width(), device.height());
    state->vtkglDisable(GL_SCISSOR_TEST);
    const bool scaled = rendered[0] != device.width() || rendered[1] != device.height();
    m_window->BlitDisplayFramebuffer(0, 0, 0, rendered[0], rendered[1], 0, 0, device.width(), device.height(),
                                     GL_COLOR_BUFFER_BIT, scaled ? GL_LINEAR : GL_NEAREST);
    // Opaque alpha, or Qt composes the widget with what lies behind it (Mesa keeps VTK's alpha).
    state->vtkglColorMask(GL_FALSE, GL_FALSE, GL_FALSE, GL_TRUE);
    state->vtkglClearColor(0.0f, 0.0f, 0.0f, 1.0f);
    state->vtkglClear(GL_COLOR_BUFFER_BIT);
    state->vtkglColorMask(GL_TRUE, GL_TRUE, GL_TRUE, GL_TRUE);
    state->PopDrawFramebufferBinding();

    // Adapt the next frame's resolution to the time this one took (GL runs asynchronously: wait).
    // Pixels, and so time, go with the scale squared.
    m_window->WaitForCompletion();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double& scale = interactive ? m_interactive_scale : m_still_scale;
    const double budget = interactive ? m_interactive_budget : m_still_budget;
    const double minimum = interactive ? 0.25 : 0.5;
    if (seconds > 1.25 * budget || (seconds < 0.6 * budget && scale < 1.0)) {
        const double adapted = std::clamp(std::round(scale * std::sqrt(budget / seconds) * 8.0) / 8.0, minimum, 1.0);
        // A still frame that could be sharper is redone; one that was too slow is not.
        if (!interactive && adapted > scale) QTimer::singleShot(0, this, [this] { update(); });
        scale = adapted;
    }
}

void VtkGLWindow::setEventPosition(const QPointF& position, Qt::KeyboardModifiers modifiers, int repeat) {
    const double ratio = devicePixelRatio() * m_render_scale;  // VTK's window is render-scaled
    m_interactor->SetEventInformationFlipY(static_cast<int>(std::lround(position.x() * ratio)),
                                           static_cast<int>(std::lround(position.y() * ratio)),
                                           modifiers.testFlag(Qt::ControlModifier) ? 1 : 0,
                                           modifiers.testFlag(Qt::ShiftModifier) ? 1 : 0, 0, repeat);
    m_interactor->SetAltKey(modifiers.testFlag(Qt::AltModifier) ? 1 : 0);
}

namespace {

unsigned long pressEventOf(Qt::MouseButton button) {
    switch (button) {
        case Qt::LeftButton: return vtkCommand::LeftButtonPressEvent;
        case Qt::RightButton: return vtkCommand::RightButtonPressEvent;
        case Qt::MiddleButton: return vtkCommand::MiddleButtonPressEvent;
        default: return vtkCommand::NoEvent;
    }
}

unsigned long releaseEventOf(Qt::MouseButton button) {
    switch (button) {
        case Qt::LeftButton: return vtkCommand::LeftButtonReleaseEvent;
        case Qt::RightButton: return vtkCommand::RightButtonReleaseEvent;
        case Qt::MiddleButton: return vtkCommand::MiddleButtonReleaseEvent;
        default: return vtkCommand::NoEvent;
    }
}

}  // namespace

void VtkGLWindow::mousePressEvent(QMouseEvent* event) {
    const unsigned long vtk_event = pressEventOf(event->button());
    if (vtk_event == vtkCommand::NoEvent) return QOpenGLWindow::mousePressEvent(event);
    m_buttons = event->buttons();
    applyRenderScale(m_interactive_scale);  // a drag starts: the frames until release are interactive
    setEventPosition(event->position(), event->modifiers());
    m_interactor->InvokeEvent(vtk_event);
    event->accept();
}

void VtkGLWindow::mouseDoubleClickEvent(QMouseEvent* event) {
    // Qt sends a double click instead of the second press; VTK expects a press with a repeat count.
    const unsigned long vtk_event = pressEventOf(event->button());
    if (vtk_event == vtkCommand::NoEvent) return QOpenGLWindow::mouseDoubleClickEvent(event);
    m_buttons = event->buttons();
    applyRenderScale(m_interactive_scale);
    setEventPosition(event->position(), event->modifiers(), 1);
    m_interactor->InvokeEvent(vtk_event);
    event->accept();
}

void VtkGLWindow::mouseReleaseEvent(QMouseEvent* event) {
    const unsigned long vtk_event = releaseEventOf(event->button());
    if (vtk_event == vtkCommand::NoEvent) return QOpenGLWindow::mouseReleaseEvent(event);
    setEventPosition(event->position(), event->modifiers());
    m_buttons = event->buttons();  // before the event: the style's closing render is a still frame
    m_interactor->InvokeEvent(vtk_event);
    event->accept();
}

void VtkGLWindow::mouseMoveEvent(QMouseEvent* event) {
    setEventPosition(event->position(), event->modifiers());
    m_interactor->InvokeEvent(vtkCommand::MouseMoveEvent);
    event->accept();
}

void VtkGLWindow::wheelEvent(QWheelEvent* event) {
    // 120 units of angle delta are one notch; touchpads send fractions, summed until a notch is full.
    // Each notch is rendered as a quick frame, so zooming stays fluid.
    requestQuickRender();
    applyRenderScale(m_interactive_scale);
    m_wheel_remainder += event->angleDelta().y();
    setEventPosition(event->position(), event->modifiers());
    while (std::abs(m_wheel_remainder) >= 120.0) {
        const bool forward = m_wheel_remainder > 0;
        m_interactor->InvokeEvent(forward ? vtkCommand::MouseWheelForwardEvent : vtkCommand::MouseWheelBackwardEvent);
        m_wheel_remainder += forward ? -120.0 : 120.0;
    }
    event->accept();
}

bool VtkGLWindow::forwardKey(QKeyEvent* event, unsigned long vtk_event) {
    const QString text = event->text();
    const char key_code = text.size() == 1 && text[0].unicode() < 128 ? static_cast<char>(text[0].unicode()) : 0;
    // '3' toggles stereo, which a window inside Qt cannot do.
    if (key_code == '3') return false;
    QByteArray key_sym = keySymOf(event->key());
    if (key_sym.isEmpty() && key_code > 32) key_sym = QByteArray(1, key_code);
    if (key_sym.isEmpty() && key_code == 0) return false;
    const Qt::KeyboardModifiers modifiers = event->modifiers();
    m_interactor->SetKeyEventInformation(modifiers.testFlag(Qt::ControlModifier) ? 1 : 0,
                                         modifiers.testFlag(Qt::ShiftModifier) ? 1 : 0, key_code,
                                         event->isAutoRepeat() ? 1 : 0, key_sym.constData());
    m_interactor->SetAltKey(modifiers.testFlag(Qt::AltModifier) ? 1 : 0);
    m_interactor->InvokeEvent(vtk_event);
    if (vtk_event == vtkCommand::KeyPressEvent && key_code != 0) m_interactor->InvokeEvent(vtkCommand::CharEvent);
    return true;
}

void VtkGLWindow::keyPressEvent(QKeyEvent* event) {
    if (!forwardKey(event, vtkCommand::KeyPressEvent)) return QOpenGLWindow::keyPressEvent(event);
    event->accept();
}

void VtkGLWindow::keyReleaseEvent(QKeyEvent* event) {
    if (!forwardKey(event, vtkCommand::KeyReleaseEvent)) return QOpenGLWindow::keyReleaseEvent(event);
    event->accept();
}

bool VtkGLWindow::event(QEvent* event) {
    if (event->type() == QEvent::Enter) {
        setEventPosition(static_cast<QEnterEvent*>(event)->position(), QGuiApplication::keyboardModifiers());
        m_interactor->InvokeEvent(vtkCommand::EnterEvent);
    } else if (event->type() == QEvent::Leave) {
        m_interactor->InvokeEvent(vtkCommand::LeaveEvent);
    }
    return QOpenGLWindow::event(event);
}

// ---- the widget ------------------------------------------------------------------------------

VtkGLWidget::VtkGLWidget(QWidget* parent) : QWidget(parent), m_window(new VtkGLWindow) {
    QWidget* container = QWidget::createWindowContainer(m_window, this);
    container->setFocusPolicy(Qt::StrongFocus);
    container->setMinimumSize(64, 64);
    setFocusProxy(container);
    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(container);
}

VtkGLWidget::~VtkGLWidget() = default;

vtkGenericOpenGLRenderWindow* VtkGLWidget::renderWindow() const { return m_window->renderWindow(); }
vtkGenericRenderWindowInteractor* VtkGLWidget::interactor() const { return m_window->interactor(); }
void VtkGLWidget::addRenderer(vtkRenderer* renderer) { m_window->addRenderer(renderer); }
void VtkGLWidget::removeRenderer(vtkRenderer* renderer) { m_window->removeRenderer(renderer); }
void VtkGLWidget::setFrameBudgets(double still_seconds, double interactive_seconds) {
    m_window->setFrameBudgets(still_seconds, interactive_seconds);
}
double VtkGLWidget::stillRenderScale() const { return m_window->stillRenderScale(); }
double VtkGLWidget::interactiveRenderScale() const { return m_window->interactiveRenderScale(); }
bool VtkGLWidget::isInteracting() const { return m_window->isInteracting(); }
QWindow* VtkGLWidget::glWindow() const { return m_window; }
QImage VtkGLWidget::grabFramebuffer() { return m_window->renderAndGrab(); }
void VtkGLWidget::requestRender() { m_window->requestRender(); }
void VtkGLWidget::requestQuickRender() { m_window->requestQuickRender(); }

QImage grabWithGlViews(QWidget* widget) {
    QImage image = widget->grab().toImage();
    QPainter painter(&image);
    for (VtkGLWidget* view : widget->findChildren<VtkGLWidget*>()) {
        if (!view->isVisible()) continue;
        const QImage frame = view->grabFramebuffer();
        if (frame.isNull()) continue;
        const QPoint at = view->mapTo(widget, QPoint(0, 0));
        painter.drawImage(QRectF(at, QSizeF(view->size())), frame, QRectF(frame.rect()));
    }
    return image;
}

}  // namespace tessera::ui
