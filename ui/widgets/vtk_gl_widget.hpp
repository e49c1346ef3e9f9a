// VtkGLWidget: shows VTK renderers in a native OpenGL window inside a widget, without VTK's Qt module
// (Debian's is built for Qt5). It drives a vtkGenericOpenGLRenderWindow inside Qt's GL context, as
// VTK's own QVTKOpenGLStereoWidget does: VTK renders into its own framebuffer in paintGL and the
// result is blitted into the window's. Mouse and key events go to a trackball-camera interactor.
//
// Why a window and not a QOpenGLWidget: a QOpenGLWidget makes its whole top-level window composite
// through OpenGL, so every repaint anywhere in the studio (a chart, a progress bar) re-composes the
// full window; under software OpenGL (Mesa's llvmpipe on a GPU-less cluster node or a VNC session)
// that is 30–60 ms per repaint. A native child window renders alone and the rest stays raster.
//
//   QSurfaceFormat::setDefaultFormat(VtkGLWidget::defaultFormat());  // before QApplication
//   VtkGLWidget view;
//   view.addRenderer(scene.renderer());
//   view.requestRender();       // after changing the scene
//   view.requestQuickRender();  // for a stream of changes (a cursor being dragged)
//
// All rendering happens in paintGL; the interactor only asks for a repaint. Input arrives at the
// native window (glWindow(): tests send their events there); grabFramebuffer() is the last frame.
//
// Level of detail: a frame that takes longer than its budget makes the next frame of its kind render
// at a lower resolution (the render scale), blitted up to the window's size. Interactive frames
// (a mouse button held, or quick renders in progress) have a small budget, still frames a larger
// one. On a GPU every frame is full size; under Mesa's llvmpipe on two cores, volume rendering is not.
#pragma once

#include <QImage>
#include <QSurfaceFormat>
#include <QWidget>

#include <vtkSmartPointer.h>

class QWindow;
class vtkGenericOpenGLRenderWindow;
class vtkGenericRenderWindowInteractor;
class vtkRenderer;

namespace tessera::ui {

class VtkGLWindow;

class VtkGLWidget : public QWidget {
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
    // down to 0.5 (still) and 0.25 (interactive) of the window's resolution.
    void setFrameBudgets(double still_seconds, double interactive_seconds);
    double stillRenderScale() const;
    double interactiveRenderScale() const;
    bool isInteracting() const;  // the next frame is an interactive one

    // The native window VTK draws in; mouse, wheel and key events are delivered to it.
    QWindow* glWindow() const;
    // Renders a frame now if one is due and returns what the window shows (device pixels).
    QImage grabFramebuffer();

public slots:
    void requestRender();  // schedules a repaint
    // Schedules an interactive frame now, and a still one once no quick render was requested for a
    // moment: cheap frames while something changes repeatedly (a cursor dragged in another view).
    void requestQuickRender();

private:
    VtkGLWindow* m_window = nullptr;  // owned by its container, a child of this widget
};

// `widget` as grab() draws it, with every VtkGLWidget inside it filled in from its window's last
// frame (grab() cannot read a native OpenGL window). For screenshots.
QImage grabWithGlViews(QWidget* widget);

}  // namespace tessera::ui
