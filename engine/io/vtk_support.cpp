#include "io/vtk_support.hpp"

#include <vtkAlgorithm.h>
#include <vtkCommand.h>
#include <vtkDataArray.h>
#include <vtkExecutive.h>
#include <vtkImageData.h>
#include <vtkNew.h>
#include <vtkObject.h>
#include <vtkPointData.h>
#include <vtkType.h>

#include <type_traits>

namespace tessera::io_detail {

namespace {

// VTK formats "ERROR: In <file>, line <n>\n<Class> (<address>): <text>\n\n"; keep <text>.
std::string strip_vtk_decoration(const char* raw) {
    std::string text = raw ? raw : "";
    const std::size_t newline = text.find('\n');
    if (text.rfind("ERROR: In ", 0) == 0 || text.rfind("Warning: In ", 0) == 0) {
        if (newline != std::string::npos) text.erase(0, newline + 1);
    }
    const std::size_t address_end = text.find("): ");
    const std::size_t first_line_end = text.find('\n');
    if (address_end != std::string::npos && address_end < first_line_end) text.erase(0, address_end + 3);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) text.pop_back();
    return text;
}

class CaptureCommand : public vtkCommand {
public:
    static CaptureCommand* New() { return new CaptureCommand; }
    vtkTypeMacro(CaptureCommand, vtkCommand)

        void Execute(vtkObject*, unsigned long event, void* call_data) override {
        if (m_capture == nullptr) return;
        m_capture->record(event == vtkCommand::ErrorEvent, m_from_executive, static_cast<const char*>(call_data));
    }

    VtkErrorCapture* m_capture = nullptr;
    bool m_from_executive = false;
};

}  // namespace

VtkErrorCapture::VtkErrorCapture(vtkAlgorithm* algorithm) {
    auto observe = [this](vtkObject* object, bool from_executive, Observed& observed) {
        vtkNew<CaptureCommand> command;
        command->m_capture = this;
        command->m_from_executive = from_executive;
        observed.object = object;
        observed.error_tag = object->AddObserver(vtkCommand::ErrorEvent, command);
        observed.warning_tag = object->AddObserver(vtkCommand::WarningEvent, command);
    };
    observe(algorithm, false, m_algorithm);
    observe(algorithm->GetExecutive(), true, m_executive);
}

VtkErrorCapture::~VtkErrorCapture() {
    for (Observed* observed : {&m_algorithm, &m_executive}) {
        if (observed->object == nullptr) continue;
        observed->object->RemoveObserver(observed->error_tag);
        observed->object->RemoveObserver(observed->warning_tag);
    }
}

void VtkErrorCapture::record(bool is_error, bool from_executive, const char* text) {
    std::string message = strip_vtk_decoration(text);
    if (!is_error) {
        m_warnings.push_back(std::move(message));
    } else if (from_executive) {
        // Only says that the algorithm failed; keep it in case the algorithm itself said nothing.
        if (m_errors.empty()) m_errors.push_back("VTK's pipeline reported a failure");
    } else {
        if (m_errors.size() == 1 && m_errors.front() == "VTK's pipeline reported a failure") m_errors.clear();
        m_errors.push_back(std::move(message));
    }
}

std::string VtkErrorCapture::message() const {
    std::string joined;
    for (const std::string& error : m_errors) {
        if (!joined.empty()) joined += "; ";
        joined += error;
    }
    return joined;
}

bool scalar_type_from_vtk(int vtk_type, ScalarType& type) {
    switch (vtk_type) {
        case VTK_UNSIGNED_CHAR:
            type = ScalarType::U8;
            return true;
        case VTK_SIGNED_CHAR:
            type = ScalarType::I8;
            return true;
        case VTK_CHAR:
            type = std::is_signed_v<char> ? ScalarType::I8 : ScalarType::U8;
            return true;
        case VTK_UNSIGNED_SHORT:
            type = ScalarType::U16;
            return true;
        case VTK_SHORT:
            type = ScalarType::I16;
            return true;
        case VTK_UNSIGNED_INT:
            type = ScalarType::U32;
            return true;
        case VTK_INT:
            type = ScalarType::I32;
            return true;
        case VTK_UNSIGNED_LONG:
            type = sizeof(unsigned long) == 8 ? ScalarType::U64 : ScalarType::U32;
            return true;
        case VTK_LONG:
            type = sizeof(long) == 8 ? ScalarType::I64 : ScalarType::I32;
            return true;
        case VTK_UNSIGNED_LONG_LONG:
            type = ScalarType::U64;
            return true;
        case VTK_LONG_LONG:
            type = ScalarType::I64;
            return true;
        case VTK_ID_TYPE:
            type = sizeof(vtkIdType) == 8 ? ScalarType::I64 : ScalarType::I32;
            return true;
        case VTK_FLOAT:
            type = ScalarType::F32;
            return true;
        case VTK_DOUBLE:
            type = ScalarType::F64;
            return true;
        default:
            return false;
    }
}

int vtk_type_of(ScalarType type) {
    switch (type) {
        case ScalarType::U8:
            return VTK_UNSIGNED_CHAR;
        case ScalarType::I8:
            return VTK_SIGNED_CHAR;
        case ScalarType::U16:
            return VTK_UNSIGNED_SHORT;
        case ScalarType::I16:
            return VTK_SHORT;
        case ScalarType::U32:
            return VTK_UNSIGNED_INT;
        case ScalarType::I32:
            return VTK_INT;
        case ScalarType::U64:
            return VTK_UNSIGNED_LONG_LONG;
        case ScalarType::I64:
            return VTK_LONG_LONG;
        case ScalarType::F32:
            return VTK_FLOAT;
        case ScalarType::F64:
            return VTK_DOUBLE;
    }
    TESSERA_ASSERT(false, "unknown scalar type " << static_cast<int>(type));
    return VTK_VOID;
}

void attach_vtk_voxels(RawImage& raw, vtkImageData* image) {
    vtkDataArray* scalars = image->GetPointData()->GetScalars();
    TESSERA_ASSERT(scalars != nullptr, "VTK image has no scalars");
    TESSERA_ASSERT(scalars->GetNumberOfComponents() == 1,
                   "expected one component, got " << scalars->GetNumberOfComponents());
    ScalarType type{};
    TESSERA_ASSERT(scalar_type_from_vtk(scalars->GetDataType(), type),
                   "unexpected VTK scalar type " << scalars->GetDataTypeAsString());
    TESSERA_ASSERT(
        scalars->GetNumberOfTuples() == raw.geometry.num_voxels(),
        "VTK image holds " << scalars->GetNumberOfTuples() << " voxels, expected " << raw.geometry.num_voxels());
    raw.scalar_type = type;
    raw.voxels = scalars->GetVoidPointer(0);
    raw.owner = std::make_shared<vtkSmartPointer<vtkImageData>>(image);
}

}  // namespace tessera::io_detail
