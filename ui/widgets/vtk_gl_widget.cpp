#include "widgets/vtk_gl_widget.hpp"

#include <QGuiApplication>
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

VtkGLWidget::VtkGLWidget(QWidget* parent)
    : QOpenGLWidget(parent),
      m_window(vtkSmartPointer<vtkGenericOpenGLRenderWindow>::New()),
      m_interactor(vtkSmartPointer<vtkGenericRenderWindowInteractor>::New()),
      m_window_observer(vtkSmartPointer<vtkCallbackCommand>::New()),
      m_render_request_observer(vtkSmartPointer<vtkCallbackCommand>::New()) {
    setFocusPolicy(Qt::StrongFocus);
    setMouseTracking(true);
    setUpdateBehavior(QOpenGLWidget::NoPartialUpdate);
    setMinimumSize(64, 64);

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
    m_window_observer->SetCallback(&VtkGLWidget::onRenderWindowEvent);
    m_window->AddObserver(vtkCommand::WindowMakeCurrentEvent, m_window_observer);
    m_window->AddObserver(vtkCommand::WindowIsCurrentEvent, m_window_observer);
    m_window->AddObserver(vtkCommand::WindowFrameEvent, m_window_observer);

    // The interactor never renders by itself: it asks Qt for a repaint and paintGL renders.
    m_interactor->SetRenderWindow(m_window);
    m_interactor->EnableRenderOff();
    vtkNew<vtkInteractorStyleTrackballCamera> style;
    m_interactor->SetInteractorStyle(style);
    m_render_request_observer->SetClientData(this);
    m_render_request_observer->SetCallback(&VtkGLWidget::onRenderWindowEvent);
    m_interactor->AddObserver(vtkCommand::RenderEvent, m_render_request_observer);
    // Without an observer, the styles' 'q'/'e' keys would try to terminate the application.
    m_interactor->AddObserver(vtkCommand::ExitEvent, m_render_request_observer);
    m_interactor->Initialize();
}

VtkGLWidget::~VtkGLWidget() {
    // Release while this object is whole: the context's aboutToBeDestroyed fires in ~QOpenGLWidget.
    if (context()) disconnect(context(), nullptr, this, nullptr);
    releaseGraphicsResources();
    m_window->RemoveObserver(m_window_observer);
    m_interactor->RemoveObserver(m_render_request_observer);
}

vtkGenericOpenGLRenderWindow* VtkGLWidget::renderWindow() const { return m_window; }
vtkGenericRenderWindowInteractor* VtkGLWidget::interactor() const { return m_interactor; }

void VtkGLWidget::addRenderer(vtkRenderer* renderer) {
    if (!renderer) return;
    if (m_window->GetNumberOfLayers() <= renderer->GetLayer()) m_window->SetNumberOfLayers(renderer->GetLayer() + 1);
    m_window->AddRenderer(renderer);
    requestRender();
}

void VtkGLWidget::removeRenderer(vtkRenderer* renderer) {
    m_window->RemoveRenderer(renderer);
    requestRender();
}

void VtkGLWidget::requestRender() { update(); }

void VtkGLWidget::requestQuickRender() {
    m_still_timer->start();
    update();
}

void VtkGLWidget::setFrameBudgets(double still_seconds, double interactive_seconds) {
    m_still_budget = std::max(still_seconds, 0.001);
    m_interactive_budget = std::max(interactive_seconds, 0.001);
}

bool VtkGLWidget::isInteracting() const {
    return m_buttons != Qt::NoButton || m_still_timer->isActive();
}

QSize VtkGLWidget::deviceSize() const {
    const double ratio = devicePixelRatioF();
    return {std::max(1, static_cast<int>(std::lround(width() * ratio))),
            std::max(1, static_cast<int>(std::lround(height() * ratio)))};
}

void VtkGLWidget::applyRenderScale(double scale) {
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

void VtkGLWidget::onRenderWindowEvent(vtkObject*, unsigned long event, void* client_data, void* call_data) {
    static_cast<VtkGLWidget*>(client_data)->handleRenderWindowEvent(event, call_data);
}

void VtkGLWidget::handleRenderWindowEvent(unsigned long event, void* call_data) {
    switch (event) {
        case vtkCommand::WindowMakeCurrentEvent:
            // Not QOpenGLWidget::makeCurrent(): that rebinds Qt's framebuffer behind VTK's back
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

void VtkGLWidget::initializeGL() {
    connect(context(), &QOpenGLContext::aboutToBeDestroyed, this, &VtkGLWidget::releaseGraphicsResources,
            Qt::UniqueConnection);
    m_window->SetReadyForRendering(true);
    m_window->OpenGLInitContext();
}

void VtkGLWidget::releaseGraphicsResources() {
    if (!context() || !m_window->GetReadyForRendering()) return;
    makeCurrent();
    m_window->ReleaseGraphicsResources(m_window);
    m_window->SetReadyForRendering(false);
    doneCurrent();
}

void VtkGLWidget::resizeGL(int, int) { applyRenderScale(m_render_scale); }

void VtkGLWidget::paintGL() {
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
        if (!interactive && adapted > scale) QTimer::singleShot(0, this, qOverload<>(&QWidget::update));
        scale = adapted;
    }
}

void VtkGLWidget::setEventPosition(const QPointF& position, Qt::KeyboardModifiers modifiers, int repeat) {
    const double ratio = devicePixelRatioF() * m_render_scale;  // VTK's window is render-scaled
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

void VtkGLWidget::mousePressEvent(QMouseEvent* event) {
    const unsigned long vtk_event = pressEventOf(event->button());
    if (vtk_event == vtkCommand::NoEvent) return QOpenGLWidget::mousePressEvent(event);
    m_buttons = event->buttons();
    applyRenderScale(m_interactive_scale);  // a drag starts: the frames until release are interactive
    setEventPosition(event->position(), event->modifiers());
    m_interactor->InvokeEvent(vtk_event);
    event->accept();
}

void VtkGLWidget::mouseDoubleClickEvent(QMouseEvent* event) {
    // Qt sends a double click instead of the second press; VTK expects a press with a repeat count.
    const unsigned long vtk_event = pressEventOf(event->button());
    if (vtk_event == vtkCommand::NoEvent) return QOpenGLWidget::mouseDoubleClickEvent(event);
    m_buttons = event->buttons();
    applyRenderScale(m_interactive_scale);
    setEventPosition(event->position(), event->modifiers(), 1);
    m_interactor->InvokeEvent(vtk_event);
    event->accept();
}

void VtkGLWidget::mouseReleaseEvent(QMouseEvent* event) {
    const unsigned long vtk_event = releaseEventOf(event->button());
    if (vtk_event == vtkCommand::NoEvent) return QOpenGLWidget::mouseReleaseEvent(event);
    setEventPosition(event->position(), event->modifiers());
    m_buttons = event->buttons();  // before the event: the style's closing render is a still frame
    m_interactor->InvokeEvent(vtk_event);
    event->accept();
}

void VtkGLWidget::mouseMoveEvent(QMouseEvent* event) {
    setEventPosition(event->position(), event->modifiers());
    m_interactor->InvokeEvent(vtkCommand::MouseMoveEvent);
    event->accept();
}

void VtkGLWidget::wheelEvent(QWheelEvent* event) {
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

bool VtkGLWidget::forwardKey(QKeyEvent* event, unsigned long vtk_event) {
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

void VtkGLWidget::keyPressEvent(QKeyEvent* event) {
    if (!forwardKey(event, vtkCommand::KeyPressEvent)) return QOpenGLWidget::keyPressEvent(event);
    event->accept();
}

void VtkGLWidget::keyReleaseEvent(QKeyEvent* event) {
    if (!forwardKey(event, vtkCommand::KeyReleaseEvent)) return QOpenGLWidget::keyReleaseEvent(event);
    event->accept();
}

void VtkGLWidget::enterEvent(QEnterEvent* event) {
    setEventPosition(event->position(), QGuiApplication::keyboardModifiers());
    m_interactor->InvokeEvent(vtkCommand::EnterEvent);
    QOpenGLWidget::enterEvent(event);
}

void VtkGLWidget::leaveEvent(QEvent* event) {
    m_interactor->InvokeEvent(vtkCommand::LeaveEvent);
    QOpenGLWidget::leaveEvent(event);
}

}  // namespace tessera::ui
