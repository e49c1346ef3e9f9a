// Internal to engine/io: what every VTK-based reader and writer needs. VTK stays inside engine/io's
// .cpp files; nothing here is included by a public header.
//
// VtkErrorCapture catches what a VTK reader or writer reports, so nothing reaches VTK's output window
// (stderr) and the message can go into a tessera::Error:
//
//   vtkNew<vtkNIFTIImageReader> reader;
//   VtkErrorCapture capture(reader);          // observes the reader and its executive
//   reader->SetFileName(...); reader->Update();
//   if (capture.has_errors()) ... capture.message() ...
#pragma once

#include "io/raw_image.hpp"

#include <vtkSmartPointer.h>

#include <string>
#include <vector>

class vtkAlgorithm;
class vtkImageData;
class vtkObject;

namespace tessera::io_detail {

class VtkErrorCapture {
public:
    explicit VtkErrorCapture(vtkAlgorithm* algorithm);
    ~VtkErrorCapture();
    VtkErrorCapture(const VtkErrorCapture&) = delete;
    VtkErrorCapture& operator=(const VtkErrorCapture&) = delete;

    bool has_errors() const { return !m_errors.empty(); }
    // The algorithm's own errors, without VTK's source location and object address, joined by "; ".
    // The executive's "returned failure for request" is dropped when the algorithm said why.
    std::string message() const;
    const std::vector<std::string>& warnings() const { return m_warnings; }

    void record(bool is_error, bool from_executive, const char* text);

private:
    struct Observed {
        vtkSmartPointer<vtkObject> object;
        unsigned long error_tag = 0;
        unsigned long warning_tag = 0;
    };
    Observed m_algorithm;
    Observed m_executive;
    std::vector<std::string> m_errors;
    std::vector<std::string> m_warnings;
};

// VTK's scalar type (VTK_SHORT, ...) as ours; false for types with no match (strings, bits).
bool scalar_type_from_vtk(int vtk_type, ScalarType& type);
int vtk_type_of(ScalarType type);

// Points `raw` at the scalars of `image` (one component), sharing ownership; sets scalar_type.
void attach_vtk_voxels(RawImage& raw, vtkImageData* image);

}  // namespace tessera::io_detail
