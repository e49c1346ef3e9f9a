// VtkGLWidget: a QOpenGLWidget that shows VTK renderers, without VTK's Qt module (Debian's is built
// for Qt5). It drives a vtkGenericOpenGLRenderWindow inside Qt's GL context, as VTK's own
// QVTKOpenGLNativeWidget does: VTK renders into its own framebuffer in paintGL and the result is
// blitted into the widget's. Mouse and key events go to a trackball-camera interactor.
//
//   QSurfaceFormat::setDefaultFormat(VtkGLWidget::defaultFormat());  // before QApplication
//   VtkGLWidget view;
//   view.addRenderer(scene.renderer());
//   view.requestRender();       // after changing the scene
//   view.requestQuickRender();  // for a stream of changes (a cursor being dragged)
//
// All rendering happens in paintGL; the interactor only asks for a repaint.
//
// Level of detail: a frame that takes longer than its budget makes the next frame of its kind render
// at a lower resolution (the render scale), blitted up to the widget's size. Interactive frames
// (a mouse button held, or quick renders in progress) have a small budget, still frames a larger
// one. On a GPU every frame is full size; under Mesa's llvmpipe on two cores, volume rendering is not.
#pragma once

#include <QOpenGLWidget>
#include <QSurfaceFormat>

#include <vtkSmartPointer.h>

class QTimer;
class vtkCallbackCommand;
class vtkGenericOpenGLRenderWindow;
class vtkGenericRenderWindowInteractor;
class vtkObject;
class vtkRenderer;

namespace tessera::ui {

class VtkGLWidget : public QOpenGLWidget {
    Q_OBJECT
public:
    explicit VtkGLWidget(QWidget* parent = nullptr);
    ~VtkGLWidget() override;

    // OpenGL 3.2 core, depth 24, no multisampling: what VTK's OpenGL2 backend needs. Set it as the
    // application's default format before constructing QApplication.
    static QSurfaceFormat defaultFormat();

    vtkGenericOpenGLRenderWindow* renderWindow() const;
    vtkGenericRenderWindowInteractor* interactor() const;
    // Adds to the render window, growing its layer count to the renderer's layer.
    void addRenderer(vtkRenderer* renderer);
    void removeRenderer(vtkRenderer* renderer);

    // Seconds a still and an interactive frame should take (defaults 0.5 and 0.1). Render scales go
    // down to 0.5 (still) and 0.25 (interactive) of the widget's resolution.
    void setFrameBudgets(double still_seconds, double interactive_seconds);
    double stillRenderScale() const { return m_still_scale; }
    double interactiveRenderScale() const { return m_interactive_scale; }
    bool isInteracting() const;  // the next frame is an interactive one

public slots:
    void requestRender();  // schedules a repaint (QWidget::update)
    // Schedules an interactive frame now, and a still one once no quick render was requested for a
    // moment: cheap frames while something changes repeatedly (a cursor dragged in another view).
    void requestQuickRender();

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
    void enterEvent(QEnterEvent* event) override;
    void leaveEvent(QEvent* event) override;

private:
    static void onRenderWindowEvent(vtkObject* caller, unsigned long event, void* client_data, void* call_data);
    void handleRenderWindowEvent(unsigned long event, void* call_data);
    void releaseGraphicsResources();
    void setEventPosition(const QPointF& position, Qt::KeyboardModifiers modifiers, int repeat = 0);
    bool forwardKey(QKeyEvent* event, unsigned long vtk_event);
    QSize deviceSize() const;
    // Resizes VTK's window to the widget's device size × scale (event positions follow).
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
    Qt::MouseButtons m_buttons;         // held in this widget
    bool m_in_paint = false;
    double m_wheel_remainder = 0.0;  // angle delta not yet sent as wheel steps
};

}  // namespace tessera::ui
